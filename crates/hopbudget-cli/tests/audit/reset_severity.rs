//! A budget reset's severity scales with how much budget it added and how often (issue #36,
//! item 5): an error (exit status 1) when the median gain is at least 100 ms in at least 5%
//! of the calls, else a warning (the exit status of a warning). Each side of both thresholds
//! is tested on copies of the Python SDK's spans (`tests/fixtures/otel-python/`) whose
//! captured `x-request-timeout-ms` headers are edited: the gateway forwards what it had left
//! plus a chosen gain, and every other hop forwards at most what it had left, so the gateway
//! is the only service that resets.

use std::collections::HashMap;

use crate::support::fixture::{fixture_lines, num, spans_mut};
use hopbudget_cli::audit::{self, AuditOptions, FindingKind, Report, Severity};
use serde_json::Value;

const HEADER: &str = "http.request.header.x_request_timeout_ms";

fn header(s: &Value) -> Option<i64> {
    s["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == HEADER)
        .map(|a| {
            a["value"]["arrayValue"]["values"][0]["stringValue"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap()
        })
}

fn set_header(s: &mut Value, ms: i64) {
    for a in s["attributes"].as_array_mut().unwrap() {
        if a["key"] == HEADER {
            a["value"]["arrayValue"]["values"][0]["stringValue"] = Value::from(ms.to_string());
        }
    }
}

/// The fixture with its deadline headers rewritten, trace by trace (`gain(n)` for the n-th
/// trace, in order of the gateway's server spans): the gateway sends what it had left plus
/// the gain (or exactly what it had left, `None`); each server span received what its caller
/// sent; every other service sends at most what it had left. As one OTLP JSON stream.
fn with_gateway_gain(gain: impl Fn(usize) -> Option<i64>) -> String {
    let mut lines = fixture_lines();
    let mut spans = spans_mut(&mut lines);
    // Parents start before their children: walk each trace in start order.
    spans.sort_by_key(|(_, s)| num(&s["startTimeUnixNano"]));
    let mut sent: HashMap<String, i64> = HashMap::new(); // client span id -> header sent
    let mut received: HashMap<String, (i128, i64)> = HashMap::new(); // server id -> (start, ms)
    let mut trace_no: HashMap<String, usize> = HashMap::new();
    for (service, s) in spans.iter_mut() {
        let id = s["spanId"].as_str().unwrap().to_owned();
        let parent = s["parentSpanId"].as_str().unwrap_or("").to_owned();
        let Some(original) = header(s) else { continue };
        if s["kind"] == 2 {
            let ms = sent.get(&parent).copied().unwrap_or(original);
            set_header(s, ms);
            received.insert(id, (num(&s["startTimeUnixNano"]), ms));
            if service == "gateway" {
                let n = trace_no.len();
                trace_no.insert(s["traceId"].as_str().unwrap().to_owned(), n);
            }
        } else if let Some(&(start, got)) = received.get(&parent) {
            // What it had left, as the audit measures it: received less the time its
            // server span had run when the call started.
            let left = got - ((num(&s["startTimeUnixNano"]) - start) / 1_000_000) as i64;
            let ms = if service == "gateway" {
                left + gain(trace_no[s["traceId"].as_str().unwrap()]).unwrap_or(0)
            } else {
                original.min(left)
            };
            set_header(s, ms);
            sent.insert(id, ms);
        } else {
            sent.insert(id, original); // the browser, at the origin
        }
    }
    drop(spans);
    lines.iter().map(|l| l.to_string() + "\n").collect()
}

/// Resets alone: the fixture's work for nobody (the incident's: the gateway and inventory go
/// on after their callers gave up) is judged apart (`audit/plain_otel.rs`) and kept a warning here.
fn audit_text(text: &str) -> Report {
    let opts = AuditOptions {
        nobody_error_ms: u64::MAX,
        ..AuditOptions::default()
    };
    audit::run_reader("edited.jsonl", text.as_bytes(), &opts)
}

fn gateway_reset(r: &Report) -> &audit::Finding {
    let resets: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::BudgetResetByHeader)
        .collect();
    assert_eq!(resets.len(), 1, "only the gateway resets: {resets:#?}");
    assert_eq!(resets[0].hop, "gateway");
    resets[0]
}

#[test]
fn the_edited_fixture_without_a_gain_has_no_reset() {
    let r = audit_text(&with_gateway_gain(|_| None));
    assert_eq!(r.problems_total, 0, "{:?}", r.problem_kinds);
    assert!(
        !r.findings
            .iter()
            .any(|f| f.kind == FindingKind::BudgetResetByHeader),
        "{}",
        audit::render::table(&r)
    );
    assert_eq!(r.exit_status(), 0);
}

/// 12 ms in 1 of 24 calls: rounding or one odd path, a warning; the exit status stays 0.
#[test]
fn a_small_rare_gain_is_a_warning_with_the_exit_status_of_a_warning() {
    let r = audit_text(&with_gateway_gain(|n| (n == 0).then_some(12)));
    let f = gateway_reset(&r);
    assert_eq!(f.severity, Severity::Warning, "{}", f.detail);
    assert_eq!(
        (f.count, f.of, f.value_ms),
        (1, 24, Some(12)),
        "{}",
        f.detail
    );
    assert!(
        f.detail.contains("in 1 of 24 calls (4.2%;")
            && f.detail.contains("it added median 12 ms, at most 12 ms")
            && f.detail.contains("a warning: under 100 ms added"),
        "{}",
        f.detail
    );
    assert_eq!(r.chain_breaks(), 0);
    assert_eq!(r.exit_status(), 0, "a warning does not fail the audit");
    let table = audit::render::table(&r);
    assert!(
        table.contains("warn  budget reset by header: gateway"),
        "{table}"
    );
}

/// 1,281 ms in 24 of 24 calls: a service that starts its own budget, an error, exit 1.
#[test]
fn a_large_gain_on_every_call_is_an_error_with_exit_status_1() {
    let r = audit_text(&with_gateway_gain(|_| Some(1_281)));
    let f = gateway_reset(&r);
    assert_eq!(f.severity, Severity::Error, "{}", f.detail);
    assert_eq!((f.count, f.of, f.value_ms), (24, 24, Some(1_281)));
    assert!(
        f.detail.contains("in 24 of 24 calls (100.0%;")
            && f.detail.contains("it added median 1281 ms")
            && f.detail
                .contains("an error: at least 100 ms added in at least 5% of calls"),
        "{}",
        f.detail
    );
    assert_eq!(r.exit_status(), 1);
}

/// Each threshold from both sides: 99 and 100 ms on every call; 1,281 ms in 1 of 24 calls
/// (4.2%) and in 2 of 24 (8.3%).
#[test]
fn both_thresholds_are_tested_from_both_sides() {
    let severity = |gain: &dyn Fn(usize) -> Option<i64>| {
        let r = audit_text(&with_gateway_gain(gain));
        let f = gateway_reset(&r);
        (f.severity, r.exit_status(), f.detail.clone())
    };
    let (s, exit, d) = severity(&|_| Some(99));
    assert_eq!((s, exit), (Severity::Warning, 0), "{d}");
    let (s, exit, d) = severity(&|_| Some(100));
    assert_eq!((s, exit), (Severity::Error, 1), "{d}");
    let (s, exit, d) = severity(&|n| (n == 3).then_some(1_281));
    assert_eq!((s, exit), (Severity::Warning, 0), "{d}");
    assert!(d.contains("a warning: in under 5% of calls (4.2%)"), "{d}");
    let (s, exit, d) = severity(&|n| (n % 12 == 3).then_some(1_281));
    assert_eq!((s, exit), (Severity::Error, 1), "{d}");
}

/// The thresholds are the operator's: `--reset-error-ms` and `--reset-error-percent`.
#[test]
fn the_thresholds_are_options_of_the_command() {
    let text = with_gateway_gain(|n| (n == 0).then_some(12));
    let run = |args: &[&str]| {
        use std::io::Write;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_hopbudget"))
            .args(["audit", "--nobody-error-ms", "1000000"])
            .args(args)
            .arg("-")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // A usage error exits before reading: a closed pipe then is no failure.
        let _ = child.stdin.take().unwrap().write_all(text.as_bytes());
        let out = child.wait_with_output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert_eq!(run(&[]).0, Some(0));
    assert_eq!(
        run(&["--reset-error-ms", "10", "--reset-error-percent", "4"]).0,
        Some(1)
    );
    let (code, err) = run(&["--reset-error-percent", "250"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("expected a percentage from 0 to 100"), "{err}");
}
