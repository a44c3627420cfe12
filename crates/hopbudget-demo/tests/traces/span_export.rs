//! The demo's traces come from the library's own span export, with the trace context
//! carried on the wire: every hop span below the edge is the child of the span whose id
//! arrived in its `traceparent` header, in the mode with hopbudget's layers (which write and
//! read the header) and in the mode without them (plain OpenTelemetry glue). And reco-scorer
//! degrades instead of refusing when the budget cannot pay for its model: the choice is on a
//! span in the trace file, in `hopbudget_degraded_total`, and in the demo's count of
//! degraded answers.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use crate::support::serial::one_demo_at_a_time;
use crate::support::trace_file;
use hopbudget_demo::demo::{self, DemoOptions, Mode, Topology};

fn options(modes: Vec<Mode>, name: &str) -> (DemoOptions, std::path::PathBuf) {
    let mut opts = DemoOptions::new(Topology::builtin().unwrap());
    opts.modes = modes;
    opts.duration = Some(Duration::from_secs(2));
    opts.drain_limit = Duration::from_secs(2);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&dir).unwrap();
    opts.traces = Some(dir.clone());
    (opts, dir)
}

#[test]
fn every_hop_span_is_the_child_of_the_span_id_that_arrived_in_its_traceparent() {
    let _demo = one_demo_at_a_time();
    // Two modes one after another in one process, each with its own exporter.
    let (opts, dir) = options(vec![Mode::Timeouts, Mode::Propagated], "demo-traces");
    let topology = opts.topology.clone();
    demo::run(&opts).unwrap();
    for mode in [Mode::Timeouts, Mode::Propagated] {
        let spans = trace_file::spans(&demo::traces::path_for(&dir, mode));
        let hops = trace_file::hops(&spans);
        let by_id: HashMap<_, _> = spans.iter().map(|s| (s.span_id.clone(), s)).collect();
        let service = |s: &hopbudget::observe::otlp::proto::Span| {
            trace_file::text(s, "service.name").unwrap().to_owned()
        };
        let (mut roots, mut from_wire) = (0, 0);
        for s in &hops {
            let name = service(s);
            let Some(caller) = topology.caller_of(&name) else {
                // The edge: the client sends no trace context, so each request starts a trace.
                assert!(s.parent_span_id.is_empty(), "{mode}: {name} has a parent");
                roots += 1;
                continue;
            };
            // The parent is in the file, in the same trace, and is the caller's hop span.
            let parent = by_id
                .get(&s.parent_span_id)
                .unwrap_or_else(|| panic!("{mode}: {name}'s parent is not in the file"));
            assert_eq!(parent.trace_id, s.trace_id, "{mode}: {name}");
            assert_eq!(service(parent), caller.name, "{mode}: {name}");
            // A hop whose handler ran recorded the header as it arrived: the parent is the
            // span id in it, not one derived from the topology.
            if trace_file::text(s, "deadline.outcome") == Some("completed") {
                let tp = trace_file::text(s, "demo.traceparent")
                    .unwrap_or_else(|| panic!("{mode}: {name} got no traceparent"));
                let fields: Vec<&str> = tp.split('-').collect();
                assert_eq!(fields.len(), 4, "{tp}");
                assert_eq!(fields[1], trace_file::hex(&s.trace_id), "{mode}: {name}");
                assert_eq!(
                    fields[2],
                    trace_file::hex(&s.parent_span_id),
                    "{mode}: {name}"
                );
                from_wire += 1;
            }
        }
        let traces: HashSet<_> = hops.iter().map(|s| s.trace_id.clone()).collect();
        assert_eq!(traces.len(), roots, "{mode}: one trace per request");
        assert!(from_wire > roots, "{mode}: {from_wire} hops checked");
        // Only the mode with hopbudget knows budgets; the other says it had none.
        let reco: Vec<_> = hops
            .iter()
            .filter(|s| service(s) == "reco-scorer")
            .collect();
        assert!(!reco.is_empty());
        for s in reco {
            match mode {
                Mode::Propagated => assert!(trace_file::int(s, "deadline.remaining_ms").is_some()),
                _ => assert_eq!(trace_file::text(s, "deadline.source"), Some("none")),
            }
        }
    }
}

#[test]
fn reco_scorer_degrades_instead_of_refusing_and_says_so() {
    let _demo = one_demo_at_a_time();
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .unwrap();
    let (opts, dir) = options(vec![Mode::Propagated], "demo-degrade");
    let (results, raw) = demo::run(&opts).unwrap();
    let p = results.mode(Mode::Propagated).unwrap();
    let table = demo::report::table(&results);

    // In the metric ...
    let rendered = metrics.render();
    let counted: f64 = rendered
        .lines()
        .find(|l| {
            l.starts_with("hopbudget_degraded_total{")
                && l.contains(r#"service="reco-scorer""#)
                && l.contains(r#"path="precomputed""#)
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no degraded count for reco-scorer\n{rendered}"));
    assert!(counted > 0.0, "{table}");

    // ... on a span in the trace file, inside reco-scorer's hop span, one per decision ...
    let spans = trace_file::spans(&demo::traces::path_for(&dir, Mode::Propagated));
    let by_id: HashMap<_, _> = spans.iter().map(|s| (s.span_id.clone(), s)).collect();
    let cheap: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "degrade" && trace_file::text(s, "degrade.choice") == Some("cheap"))
        .collect();
    assert_eq!(
        cheap.len() as f64,
        counted,
        "every cheap choice is on a span"
    );
    for s in &cheap {
        let hop = by_id[&s.parent_span_id];
        assert_eq!(trace_file::text(hop, "service.name"), Some("reco-scorer"));
        assert!(trace_file::int(s, "deadline.remaining_ms").unwrap() < 240);
    }

    // ... no refusal while the cheap path could still answer (reco-scorer's minimum budget
    // is the cheap path's cost, not the model's) ...
    let reco_spec = opts.topology.service("reco-scorer").unwrap();
    let cheap_cost = reco_spec.degrade.as_ref().unwrap().latency.p99_ms as i64;
    for s in trace_file::hops(&spans) {
        if trace_file::text(s, "service.name") == Some("reco-scorer")
            && trace_file::text(s, "deadline.outcome") == Some("refused")
        {
            let required = trace_file::int(s, "deadline.required_ms").unwrap();
            assert!(
                required <= cheap_cost,
                "refused needing {required} ms\n{table}"
            );
        }
    }

    // ... and in the answers: a request reco-scorer answered from its cheaper path reaches
    // the client (when it does: on a loaded machine it may have expired above) marked
    // degraded, and the complete-answer goodput leaves it out.
    let clients = raw[0].collector.clients();
    let mut checked = 0;
    for s in &cheap {
        let id = trace_file::int(by_id[&s.parent_span_id], "demo.request_id").unwrap() as u64;
        if let Some(c) = clients.get(&id).filter(|c| c.ok) {
            assert!(c.degraded, "request {id} took the cheaper path\n{table}");
            checked += 1;
        }
    }
    println!(
        "{checked} of {} cheap answers reached the client",
        cheap.len()
    );
    let budget = Duration::from_millis(results.budget_ms);
    let complete_in_budget = clients
        .values()
        .filter(|c| c.ok && !c.degraded && c.end.is_some_and(|e| e - c.start <= budget))
        .count();
    let secs = opts.duration.unwrap().as_secs_f64();
    assert!(
        (p.full_goodput_per_s - complete_in_budget as f64 / secs).abs() < 1e-9,
        "{table}"
    );
}
