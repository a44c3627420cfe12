//! `--forgetful SERVICE` (S13): one hop that ignores the inbound deadline resets the budget
//! for everything below it, and the traces show it.

use std::time::Duration;

use crate::support::serial::one_demo_at_a_time;
use crate::support::trace_file;
use hopbudget_demo::demo::{self, DemoOptions, Mode, Topology};

#[test]
fn a_forgetful_hop_resets_the_budget_below_it_and_the_traces_show_it() {
    let _demo = one_demo_at_a_time();
    let topology = Topology::builtin().unwrap();
    let mut opts = DemoOptions::new(topology.clone());
    opts.modes = vec![Mode::Propagated];
    opts.duration = Some(Duration::from_secs(2));
    opts.drain_limit = Duration::from_secs(3);
    opts.forgetful = Some("inventory".into());
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("demo-forgetful");
    std::fs::create_dir_all(&dir).unwrap();
    opts.traces = Some(dir.clone());
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

    // The traces the library exported carry the same story, span by span: the forgetful
    // hop's span (the demo's own: it has no server layer) records the fresh budget it made
    // up, and warehouse-router's (hopbudget's) the reset budget it received, as a child of
    // inventory's span, whose context arrived on the wire.
    let spans = trace_file::spans(&demo::traces::path_for(&dir, Mode::Propagated));
    let hops = trace_file::hops(&spans);
    let of = |name: &str| -> Vec<_> {
        hops.iter()
            .filter(|s| trace_file::text(s, "service.name") == Some(name))
            .collect()
    };
    let inventory = of("inventory");
    assert!(!inventory.is_empty());
    assert!(
        inventory
            .iter()
            .all(|s| trace_file::text(s, "deadline.source") == Some("local")),
        "the forgetful hop made its own budget"
    );
    let router = of("warehouse-router");
    let remaining: Vec<i64> = router
        .iter()
        .filter_map(|s| trace_file::int(s, "deadline.remaining_ms"))
        .collect();
    assert!(remaining.iter().any(|&ms| ms > 1_000), "{remaining:?}");
    let by_id: std::collections::HashMap<_, _> =
        spans.iter().map(|s| (s.span_id.clone(), s)).collect();
    for s in &router {
        assert_eq!(s.trace_id.len(), 16);
        let parent = by_id.get(&s.parent_span_id).expect("parent in the file");
        assert_eq!(trace_file::text(parent, "service.name"), Some("inventory"));
    }
    // Every hop the collector saw is in the file (the file also has the hops refused by a
    // server layer before any handler, which the collector never sees).
    assert!(hops.len() >= raw[0].collector.spans().len());
}

#[test]
fn forgetful_must_name_a_service() {
    let mut opts = DemoOptions::new(Topology::builtin().unwrap());
    opts.forgetful = Some("nope".into());
    let err = demo::run(&opts).unwrap_err();
    assert!(err.contains("--forgetful nope: no such service"), "{err}");
}
