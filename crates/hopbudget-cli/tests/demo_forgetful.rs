//! `--forgetful SERVICE` (S13): one hop that ignores the inbound deadline resets the budget
//! for everything below it, and the traces show it.

use std::time::{Duration, SystemTime};

use hopbudget_cli::demo::{self, DemoOptions, Mode, Topology};

#[test]
fn a_forgetful_hop_resets_the_budget_below_it_and_the_traces_show_it() {
    let topology = Topology::builtin().unwrap();
    let mut opts = DemoOptions::new(topology.clone());
    opts.modes = vec![Mode::Propagated];
    opts.duration = Some(Duration::from_secs(2));
    opts.drain_limit = Duration::from_secs(3);
    opts.forgetful = Some("inventory".into());
    let (results, raw) = demo::run(&opts).unwrap();
    let p = results.mode(Mode::Propagated).unwrap();
    let table = demo::report::table(&results);
    let hop = |name: &str| p.hops.iter().find(|h| h.service == name).unwrap().clone();

    // Above the forgetful hop the budget shrinks from the client's 500 ms ...
    assert!(
        hop("pricing").budget_at_arrival_p50_ms.unwrap() < 500,
        "{table}"
    );
    // ... below it the budget is inventory's own 2 s default, minus what was spent since.
    let below = hop("warehouse-router").budget_at_arrival_p50_ms.unwrap();
    assert!(below > 1_000, "warehouse-router saw {below} ms\n{table}");

    // The OTLP JSON traces carry the same story, span by span.
    let doc = demo::traces::otlp_json(
        &topology,
        &raw[0].collector.spans(),
        "propagated",
        (tokio::time::Instant::now(), SystemTime::now()),
    );
    let resource = doc["resourceSpans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource"]["attributes"][0]["value"]["stringValue"] == "warehouse-router")
        .unwrap();
    let spans = resource["scopeSpans"][0]["spans"].as_array().unwrap();
    assert!(!spans.is_empty());
    let remaining: Vec<u64> = spans
        .iter()
        .filter_map(|s| {
            s["attributes"]
                .as_array()?
                .iter()
                .find(|a| a["key"] == "deadline.remaining_ms")?["value"]["intValue"]
                .as_str()?
                .parse()
                .ok()
        })
        .collect();
    assert!(remaining.iter().any(|&ms| ms > 1_000), "{remaining:?}");
    assert_eq!(spans[0]["traceId"].as_str().unwrap().len(), 32);
    assert!(!spans[0]["parentSpanId"].as_str().unwrap().is_empty());

    // The file form is what the `otlp` reader (and so `hopbudget audit`) takes.
    let path = std::env::temp_dir().join(format!("demo-forgetful-{}.jsonl", std::process::id()));
    std::fs::write(&path, format!("{doc}\n")).unwrap();
    let requests = hopbudget::observe::otlp::read(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let spans: usize = requests
        .iter()
        .flat_map(|r| &r.resource_spans)
        .flat_map(|r| &r.scope_spans)
        .map(|s| s.spans.len())
        .sum();
    assert_eq!(spans, raw[0].collector.spans().len());
}

#[test]
fn forgetful_must_name_a_service() {
    let mut opts = DemoOptions::new(Topology::builtin().unwrap());
    opts.forgetful = Some("nope".into());
    let err = demo::run(&opts).unwrap_err();
    assert!(err.contains("--forgetful nope: no such service"), "{err}");
}
