//! The rollout map (issue #36, item 4): per service, the share of inbound requests that
//! arrived with a deadline, whether it forwards one, its refusals and its late work; in the
//! table, `--json` and `--html`. On the Python SDK's spans (`tests/fixtures/otel-python/`),
//! as recorded and with edited copies (a service that stops forwarding the header on half
//! its calls, refusals answered 503). The hopbudget-layer case is in `audit/library_spans.rs`.

use crate::support::fixture;
use crate::support::fixture::{fixture_lines, spans_mut, to_text};
use hopbudget_cli::audit::{self, AuditOptions, Forwards, Report, RolloutRow};
use serde_json::Value;

fn row<'a>(r: &'a Report, service: &str) -> &'a RolloutRow {
    r.rollout
        .iter()
        .find(|s| s.service == service)
        .unwrap_or_else(|| panic!("no {service} in {:#?}", r.rollout))
}

fn audit_text(text: &str) -> Report {
    audit::run_reader("t.jsonl", text.as_bytes(), &AuditOptions::default())
}

type Summary = (u64, u64, u64, u64, Forwards, u64, u64);

fn summary(r: &RolloutRow) -> Summary {
    (
        r.inbound,
        r.inbound_with_deadline,
        r.calls_out,
        r.calls_out_with_deadline,
        r.forwards,
        r.refused,
        r.late,
    )
}

/// Every service sends `x-request-timeout-ms` and the instrumentation captured it: the
/// rollout is complete. The 8 slow requests went on late at each server.
#[test]
fn the_python_fixture_is_fully_rolled_out_with_its_late_work() {
    let r = audit_text(&to_text(&fixture_lines()));
    let services: Vec<&str> = r.rollout.iter().map(|s| s.service.as_str()).collect();
    assert_eq!(
        services,
        ["gateway", "orchestrator", "inventory", "browser"],
        "shallowest first"
    );
    assert_eq!(
        summary(row(&r, "browser")),
        (0, 0, 24, 24, Forwards::All, 0, 0)
    );
    assert_eq!(row(&r, "browser").inbound_deadline_share, None);
    assert_eq!(
        summary(row(&r, "gateway")),
        (24, 24, 24, 24, Forwards::All, 0, 8)
    );
    assert_eq!(row(&r, "gateway").inbound_deadline_share, Some(1.0));
    assert_eq!(
        summary(row(&r, "orchestrator")),
        (24, 24, 24, 24, Forwards::All, 0, 8)
    );
    assert_eq!(
        summary(row(&r, "inventory")),
        (24, 24, 0, 0, Forwards::NoCalls, 0, 8)
    );
}

/// A copy where the orchestrator sends no header on every other call and inventory answers
/// every fourth request 503: the map shows the orchestrator forwarding on some calls,
/// inventory receiving a deadline on half, and inventory's refusals.
fn half_rolled_out() -> String {
    let mut lines = fixture_lines();
    let mut spans = spans_mut(&mut lines);
    spans.sort_by_key(|(_, s)| fixture::num(&s["startTimeUnixNano"]));
    let mut dropped: Vec<String> = Vec::new();
    let (mut calls, mut inventory) = (0, 0);
    for (service, s) in spans.iter_mut() {
        if service == "orchestrator" && s["kind"] == 3 {
            calls += 1;
            if calls % 2 == 0 {
                let attrs = s["attributes"].as_array_mut().unwrap();
                attrs.retain(|a| {
                    !a["key"]
                        .as_str()
                        .unwrap()
                        .starts_with("http.request.header.")
                });
                dropped.push(s["spanId"].as_str().unwrap().to_owned());
            }
        }
    }
    for (service, s) in spans.iter_mut() {
        if service == "inventory" && s["kind"] == 2 {
            let parent = s["parentSpanId"].as_str().unwrap().to_owned();
            let attrs = s["attributes"].as_array_mut().unwrap();
            if dropped.contains(&parent) {
                attrs.retain(|a| {
                    !a["key"]
                        .as_str()
                        .unwrap()
                        .starts_with("http.request.header.")
                });
            }
            inventory += 1;
            if inventory % 4 == 0 {
                for a in attrs.iter_mut() {
                    if a["key"] == "http.status_code" {
                        a["value"] = serde_json::json!({"intValue": "503"});
                    }
                }
            }
        }
    }
    drop(spans);
    to_text(&lines)
}

#[test]
fn a_partial_rollout_shows_who_forwards_and_who_receives_and_refuses() {
    let r = audit_text(&half_rolled_out());
    assert_eq!(r.problems_total, 0, "{:?}", r.problem_kinds);
    assert_eq!(
        summary(row(&r, "orchestrator")),
        (24, 24, 24, 12, Forwards::Some, 0, 8)
    );
    let inv = row(&r, "inventory");
    assert_eq!(summary(inv), (24, 12, 0, 0, Forwards::NoCalls, 6, 8));
    assert_eq!(inv.inbound_deadline_share, Some(0.5));

    let table = audit::render::table(&r);
    assert!(table.contains("rollout map ("), "{table}");
    let map = &table[table.find("rollout map (").unwrap()..];
    let line = |service: &str| {
        map.lines()
            .find(|l| l.trim_start().starts_with(service) && l.contains(" of "))
            .unwrap_or_else(|| panic!("no {service} row\n{table}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(
        line("orchestrator"),
        "orchestrator 24 24 of 24 (100%) some (12 of 24) 0 8",
        "{table}"
    );
    assert_eq!(
        line("inventory"),
        "inventory 24 12 of 24 (50%) no calls 6 8",
        "{table}"
    );

    let json: Value = serde_json::from_str(&audit::render::json(&r)).unwrap();
    let inv = json["rollout"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["service"] == "inventory")
        .unwrap();
    for (field, want) in [
        ("inbound", Value::from(24)),
        ("inbound_with_deadline", Value::from(12)),
        ("inbound_deadline_share", Value::from(0.5)),
        ("calls_out", Value::from(0)),
        ("calls_out_with_deadline", Value::from(0)),
        ("forwards", Value::from("no_calls")),
        ("refused", Value::from(6)),
        ("late", Value::from(8)),
    ] {
        assert_eq!(inv[field], want, "{field} in {inv}");
    }
    let orch = json["rollout"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["service"] == "orchestrator")
        .unwrap();
    assert_eq!(orch["forwards"], "some");

    let page = audit::page::html(&r);
    assert!(
        page.contains("<h2>Rollout map</h2><table class=\"rollout\">"),
        "{page}"
    );
    assert!(
        page.contains(
            "<tr class=\"partial\"><td>inventory</td><td>24</td><td>12 of 24 (50%)</td>\
             <td>no calls</td><td>6</td><td>8</td></tr>"
        ),
        "{page}"
    );
}

/// The HTML page's call graph (#50 item 10) colours a service that stops forwarding the
/// header as dropping it; the others, which pass it on, as forwarding.
#[test]
fn the_call_graph_draws_the_service_that_drops_the_header() {
    let page = audit::page::html(&audit_text(&half_rolled_out()));
    for (service, class) in [
        ("orchestrator", "drops"),
        ("gateway", "resets"),
        ("browser", "forwards"),
        ("inventory", "forwards"),
    ] {
        let node = format!("<rect class=\"node node-{class}\" data-service=\"{service}\"");
        assert!(page.contains(&node), "no {node} in {page}");
    }
}
