//! The late-work tolerance (`--late-tolerance-ms`, default 50 ms): a server span that ends a
//! few ms after its caller's span or the request's root (a healthy request winding down) is
//! not work for nobody; one that ends later is. On a copy of the Python SDK's spans
//! (`tests/fixtures/otel-python/`) with the end of one fast request's gateway span moved to
//! 30 ms or 80 ms after the browser's span ended.

use crate::support::fixture::{fixture_lines, num, spans_mut, to_text};
use hopbudget_cli::audit::{self, AuditOptions, FindingKind, Report};
use serde_json::Value;

/// The fixture with the gateway span of the first request that finished in time ending
/// `after_ms` after the browser's client span that called it.
fn gateway_ends_after_browser(after_ms: i128) -> String {
    let mut lines = fixture_lines();
    let mut spans = spans_mut(&mut lines);
    let browser: Vec<(String, i128)> = spans
        .iter()
        .filter(|(svc, s)| svc == "browser" && s["kind"] == 3)
        .map(|(_, s)| {
            (
                s["spanId"].as_str().unwrap().to_owned(),
                num(&s["endTimeUnixNano"]),
            )
        })
        .collect();
    let (_, gw) = spans
        .iter_mut()
        .filter(|(svc, s)| svc == "gateway" && s["kind"] == 2)
        .find(|(_, s)| {
            browser.iter().any(|(id, end)| {
                s["parentSpanId"] == id.as_str() && num(&s["endTimeUnixNano"]) < *end
            })
        })
        .expect("a request that finished in time");
    let parent = gw["parentSpanId"].as_str().unwrap().to_owned();
    let caller_end = browser.iter().find(|(id, _)| *id == parent).unwrap().1;
    gw["endTimeUnixNano"] = Value::from((caller_end + after_ms * 1_000_000).to_string());
    drop(spans);
    to_text(&lines)
}

fn after_caller(r: &Report) -> u64 {
    r.findings
        .iter()
        .find(|f| f.kind == FindingKind::WorkAfterCallerLeft && f.hop == "gateway")
        .map_or(0, |f| f.count)
}

fn run(text: &str, late_tolerance_ms: i64) -> Report {
    let opts = AuditOptions {
        late_tolerance_ms,
        ..AuditOptions::default()
    };
    audit::run_reader("edited.jsonl", text.as_bytes(), &opts)
}

#[test]
fn work_within_the_late_tolerance_is_not_a_finding_past_it_is() {
    assert_eq!(AuditOptions::default().late_tolerance_ms, 50);
    // The fixture: 8 slow requests, where the gateway went on about 1.2 s.
    let untouched = to_text(&fixture_lines());
    assert_eq!(after_caller(&run(&untouched, 50)), 8);

    let within = gateway_ends_after_browser(30);
    let r = run(&within, 50);
    assert_eq!(after_caller(&r), 8, "{}", audit::render::table(&r));
    let gw = r.services.iter().find(|s| s.service == "gateway").unwrap();
    assert_eq!(gw.after_root, 8);
    // With no tolerance the 30 ms wind-down counts.
    assert_eq!(after_caller(&run(&within, 0)), 9);

    let past = gateway_ends_after_browser(80);
    let r = run(&past, 50);
    assert_eq!(after_caller(&r), 9, "{}", audit::render::table(&r));
    let gw = r.services.iter().find(|s| s.service == "gateway").unwrap();
    assert_eq!(gw.after_root, 9);
}
