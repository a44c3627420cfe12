//! The audit's verdicts match what each service was told (issue #45, item 4; C26, S20), on
//! the traces of a fleet behind `hopbudget proxy`: a Node `web` gateway, a Flask `orders`
//! and a Go `stock`, each behind its own sidecar, a client that gives up at 800 ms. Each
//! sidecar emits an ingress span per request and an egress span per outbound call (what
//! the next hop was told, `deadline.told_ms`; whether the call matched an inbound request,
//! `deadline.matched`); each service's own OpenTelemetry SDK emits its server and client
//! spans below them. The traces are written here as the Collector's `file` exporter writes
//! them (one export request per line, OTLP JSON) and audited as a user does: the library
//! call and the `hopbudget audit FILE` command.
//!
//! Each sidecar keeps 10 ms back and allows 2 ms transit (C2): web arrives with 800 ms at
//! t=0, tells web 790; web calls orders at t=6, its egress tells orders 794 - 12 = 782;
//! orders (told 772) calls stock at t=150, its egress tells stock 639 - 12 = 627; stock is
//! told 617. So every service is told what its caller had left less the margin, and the
//! deepest hop's deadline fires first: 10-20 ms before its callers' own.
//!
//! One file on purpose, over 500 lines: the verdict tests share the fleet's trace builder defined
//! here.

use crate::support::command;
use hopbudget_cli::audit::{self, AuditOptions, FindingKind, Forwards, Report, Severity};
use serde_json::{Value, json};

const BASE_NS: u64 = 1_700_000_000_000_000_000;
const TRACES: usize = 40;

/// How one request goes.
#[derive(Clone, Copy, Default)]
struct Case {
    /// stock's work runs past its deadline: its sidecar ends it at what stock was told.
    expires: bool,
    /// orders' own client span sends this `x-request-timeout-ms` (a forgetful orders that
    /// starts a fresh budget); `None`: it sends none, and its egress stamps the budget.
    orders_sends: Option<i64>,
    /// web's egress tells orders this instead of what web had left (a sidecar bug).
    web_tells: Option<i64>,
    /// web does not carry the trace context: its SDK starts a trace of its own, and its
    /// egress call matches no inbound request (it is given the edge total, 986 ms).
    web_unmatched: bool,
}

fn attr(key: &str, value: Value) -> Value {
    let value = match value {
        Value::String(s) => json!({ "stringValue": s }),
        Value::Bool(b) => json!({ "boolValue": b }),
        n => json!({ "intValue": n.to_string() }),
    };
    json!({ "key": key, "value": value })
}

fn header(ms: i64) -> Value {
    json!({
        "key": "http.request.header.x_request_timeout_ms",
        "value": { "arrayValue": { "values": [ { "stringValue": ms.to_string() } ] } }
    })
}

/// One span: times in ms from the start of request `n`.
struct S {
    service: &'static str,
    scope: &'static str,
    trace: u128,
    id: u64,
    parent: u64,
    name: &'static str,
    kind: u8,
    start: u64,
    end: u64,
    attrs: Vec<Value>,
}

fn span_json(n: usize, s: &S) -> Value {
    let t0 = BASE_NS + n as u64 * 10_000_000_000;
    json!({
        "traceId": format!("{:032x}", s.trace),
        "spanId": format!("{:016x}", s.id),
        "parentSpanId": if s.parent == 0 { String::new() } else { format!("{:016x}", s.parent) },
        "name": s.name,
        "kind": s.kind,
        "startTimeUnixNano": (t0 + s.start * 1_000_000).to_string(),
        "endTimeUnixNano": (t0 + s.end * 1_000_000).to_string(),
        "attributes": s.attrs,
        "status": {}
    })
}

fn ingress(arrived: i64, told: i64, outcome: &str, status: i64) -> Vec<Value> {
    vec![
        attr("hopbudget.proxy", json!("ingress")),
        attr("deadline.remaining_ms", json!(arrived)),
        attr("deadline.source", json!("x-request-timeout-ms")),
        attr("deadline.margin_ms", json!(10)),
        attr("deadline.outcome", json!(outcome)),
        attr("deadline.told_ms", json!(told)),
        attr("http.response.status_code", json!(status)),
    ]
}

fn egress(remaining: i64, told: i64, matched: bool, to: &str, status: i64) -> Vec<Value> {
    vec![
        attr("hopbudget.proxy", json!("egress")),
        attr("deadline.remaining_ms", json!(remaining)),
        attr("deadline.told_ms", json!(told)),
        attr("deadline.matched", json!(matched)),
        attr("deadline.outcome", json!("completed")),
        attr("server.address", json!(to)),
        attr("http.response.status_code", json!(status)),
    ]
}

/// The spans of request `n`: web -> orders -> stock.
fn chain(n: usize, c: Case) -> Vec<S> {
    let trace = 0xa000 + n as u128;
    // web's own SDK trace, when web does not carry the sidecar's context.
    let web_trace = if c.web_unmatched {
        0xb000 + n as u128
    } else {
        trace
    };
    let stock_work = 12 + (n as u64 * 7) % 23;
    // stock is told 617 at t=151, so its deadline fires at t=768.
    let stock_end = if c.expires { 768 } else { 152 + stock_work };
    let status = if c.expires { 504 } else { 200 };
    let e = stock_end;
    let web_egress_told = c.web_tells.unwrap_or(782);
    let mut web_egress = egress(794, web_egress_told, !c.web_unmatched, "orders", status);
    if c.web_unmatched {
        // The edge total less the margin, as C8 gives a request without a deadline.
        web_egress = egress(998, 986, false, "orders", status);
    }
    let mut orders_client = vec![attr("http.response.status_code", json!(status))];
    if let Some(ms) = c.orders_sends {
        orders_client.push(header(ms));
    }
    let span = |service, scope, trace, id, parent, name, kind, start, end, attrs| S {
        service,
        scope,
        trace,
        id: (n as u64) << 8 | id,
        parent: if parent == 0 {
            0
        } else {
            (n as u64) << 8 | parent
        },
        name,
        kind,
        start,
        end,
        attrs,
    };
    let web_root = if c.web_unmatched { 0 } else { 1 };
    let orders_arrived = if c.web_unmatched {
        986
    } else {
        c.web_tells.unwrap_or(782)
    };
    vec![
        // The client sent 800 ms and no traceparent: web's sidecar starts the trace.
        span(
            "web",
            "hopbudget-proxy",
            trace,
            1,
            0,
            "GET /checkout",
            2,
            0,
            e + 8,
            ingress(800, 790, "completed", status),
        ),
        span(
            "web",
            "@opentelemetry/instrumentation-http",
            web_trace,
            2,
            web_root,
            "GET /checkout",
            2,
            1,
            e + 7,
            vec![attr("http.response.status_code", json!(status))],
        ),
        span(
            "web",
            "@opentelemetry/instrumentation-http",
            web_trace,
            3,
            2,
            "POST",
            3,
            5,
            e + 6,
            vec![attr("http.response.status_code", json!(status))],
        ),
        span(
            "web",
            "hopbudget-proxy",
            web_trace,
            4,
            3,
            "POST orders",
            3,
            6,
            e + 6,
            web_egress,
        ),
        span(
            "orders",
            "hopbudget-proxy",
            web_trace,
            5,
            4,
            "POST /orders",
            2,
            7,
            e + 5,
            ingress(orders_arrived, 772, "completed", status),
        ),
        // Flask's instrumentation captures the header its sidecar stamped.
        span(
            "orders",
            "opentelemetry.instrumentation.flask",
            web_trace,
            6,
            5,
            "POST /orders",
            2,
            8,
            e + 4,
            vec![
                header(772),
                attr("http.response.status_code", json!(status)),
            ],
        ),
        span(
            "orders",
            "opentelemetry.instrumentation.requests",
            web_trace,
            7,
            6,
            "GET",
            3,
            149,
            e + 2,
            orders_client,
        ),
        span(
            "orders",
            "hopbudget-proxy",
            web_trace,
            8,
            7,
            "GET stock",
            3,
            150,
            e + 2,
            egress(639, 627, true, "stock", status),
        ),
        span(
            "stock",
            "hopbudget-proxy",
            web_trace,
            9,
            8,
            "GET /stock",
            2,
            151,
            e + 1,
            ingress(
                627,
                617,
                if c.expires { "expired" } else { "completed" },
                status,
            ),
        ),
        span(
            "stock",
            "go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp",
            web_trace,
            10,
            9,
            "GET /stock",
            2,
            152,
            e,
            // otelhttp configured to capture the header its sidecar stamped.
            vec![
                header(617),
                attr("http.response.status_code", json!(status)),
            ],
        ),
    ]
}

/// A batch job that posts to orders directly (depth 1, not its usual 2).
fn direct_call(n: usize) -> Vec<S> {
    let id = |i: u64| 0xf000_0000 | (n as u64) << 8 | i;
    vec![
        S {
            service: "orders",
            scope: "hopbudget-proxy",
            trace: 0xc000 + n as u128,
            id: id(1),
            parent: 0,
            name: "POST /orders",
            kind: 2,
            start: 0,
            end: 3,
            attrs: ingress(1_000, 990, "completed", 200),
        },
        S {
            service: "orders",
            scope: "opentelemetry.instrumentation.flask",
            trace: 0xc000 + n as u128,
            id: id(2),
            parent: id(1),
            name: "POST /orders",
            kind: 2,
            start: 1,
            end: 2,
            attrs: vec![header(990)],
        },
    ]
}

/// A resource's spans by instrumentation scope.
type Scopes<'a> = Vec<(&'a str, Vec<Value>)>;

/// Request `n`'s spans as one export request line, grouped by service and scope as an
/// exporter sends them.
fn line(n: usize, spans: &[S]) -> String {
    let mut resources: Vec<(&str, Scopes)> = Vec::new();
    for s in spans {
        let r = match resources.iter().position(|(svc, _)| *svc == s.service) {
            Some(i) => &mut resources[i].1,
            None => {
                resources.push((s.service, Vec::new()));
                &mut resources.last_mut().unwrap().1
            }
        };
        match r.iter_mut().find(|(scope, _)| *scope == s.scope) {
            Some((_, v)) => v.push(span_json(n, s)),
            None => r.push((s.scope, vec![span_json(n, s)])),
        }
    }
    let resource_spans: Vec<Value> = resources
        .into_iter()
        .map(|(service, scopes)| {
            json!({
                "resource": { "attributes": [ attr("service.name", json!(service)) ] },
                "scopeSpans": scopes.into_iter().map(|(scope, spans)| json!({
                    "scope": { "name": scope },
                    "spans": spans
                })).collect::<Vec<_>>()
            })
        })
        .collect();
    json!({ "resourceSpans": resource_spans }).to_string() + "\n"
}

/// `TRACES` requests (`case(n)` for the n-th) and 5 direct calls to orders, as one file's
/// text.
fn fleet(case: impl Fn(usize) -> Case) -> String {
    let mut text = String::new();
    for n in 0..TRACES {
        text += &line(n, &chain(n, case(n)));
    }
    for n in 0..5 {
        text += &line(TRACES + n, &direct_call(n));
    }
    text
}

/// The same requests as the sidecars' exporters were off: only the services' own spans,
/// each sidecar span's child re-parented to its parent (as the context passed through).
fn fleet_without_sidecar_spans() -> String {
    let mut text = String::new();
    for n in 0..TRACES {
        let spans = chain(n, Case::default());
        let parent_of = |id: u64| spans.iter().find(|s| s.id == id).map_or(0, |s| s.parent);
        let kept: Vec<S> = spans
            .iter()
            .filter(|s| s.scope != "hopbudget-proxy")
            .map(|s| {
                let mut parent = s.parent;
                while spans
                    .iter()
                    .any(|p| p.id == parent && p.scope == "hopbudget-proxy")
                {
                    parent = parent_of(parent);
                }
                S {
                    parent,
                    attrs: s.attrs.clone(),
                    ..*s
                }
            })
            .collect();
        text += &line(n, &kept);
    }
    text
}

/// The rollout map and the findings never disagree: a service the map says forwards a
/// deadline on all its calls has no "deadline dropped" finding, and no finding counts more
/// drops than the map counts calls without a deadline.
fn assert_the_map_agrees(r: &Report) {
    for row in &r.rollout {
        let dropped: u64 = of_kind(r, FindingKind::DeadlineDroppedByHeader)
            .iter()
            .filter(|f| f.hop == row.service)
            .map(|f| f.count)
            .sum();
        assert!(
            dropped <= row.calls_out - row.calls_out_with_deadline,
            "{} forwards {:?} ({} of {}) but {dropped} drops are reported:\n{}",
            row.service,
            row.forwards,
            row.calls_out_with_deadline,
            row.calls_out,
            verdicts(r)
        );
    }
}

fn audit_text(text: &str) -> Report {
    audit::run_reader("sidecars.jsonl", text.as_bytes(), &AuditOptions::default())
}

fn of_kind(r: &Report, kind: FindingKind) -> Vec<&audit::Finding> {
    r.findings.iter().filter(|f| f.kind == kind).collect()
}

/// The report's errors and warnings, one line each, for a failing assertion to show.
fn verdicts(r: &Report) -> String {
    r.findings
        .iter()
        .filter(|f| f.severity != Severity::Info)
        .map(|f| format!("{:?} {:?}: {}\n", f.severity, f.kind, f.detail))
        .collect()
}

/// `hopbudget audit FILE`: its exit status and output.
fn audit_command(name: &str, text: &str) -> (Option<i32>, String) {
    let path = std::env::temp_dir().join(format!(
        "hopbudget-audit-sidecar-{name}-{}.jsonl",
        std::process::id()
    ));
    std::fs::write(&path, text).unwrap();
    let (code, out, _) = command::hopbudget(&["audit", path.to_str().unwrap()]);
    let _ = std::fs::remove_file(&path);
    (code, out)
}

/// A healthy chain: exit 0, no error and no warning. In particular no "deadline dropped"
/// on services that forward no header themselves (their sidecar stamps it), which is what
/// the rollout map says too ("forwards all"), and each request counts once per service
/// although the sidecar and the service both record it.
#[test]
fn a_healthy_chain_behind_sidecars_is_clean_and_the_rollout_map_agrees() {
    let r = audit_text(&fleet(|_| Case::default()));
    assert_eq!(r.problems_total, 0, "{:?}", r.problem_kinds);
    assert_the_map_agrees(&r);
    assert_eq!(verdicts(&r), "", "{}", audit::render::table(&r));
    assert!(of_kind(&r, FindingKind::DeadlineDroppedByHeader).is_empty());
    assert_eq!(r.exit_status(), 0);
    let row = |s: &str| r.rollout.iter().find(|x| x.service == s).unwrap();
    for (service, inbound, calls) in [("web", 40, 40), ("orders", 45, 40), ("stock", 40, 0)] {
        let x = row(service);
        assert_eq!(
            (
                x.inbound,
                x.inbound_with_deadline,
                x.calls_out,
                x.calls_out_with_deadline
            ),
            (inbound, inbound, calls, calls),
            "{service}: {x:?}"
        );
    }
    assert_eq!(row("orders").forwards, Forwards::All);
    assert_eq!(row("stock").forwards, Forwards::NoCalls);
    let (code, out) = audit_command("healthy", &fleet(|_| Case::default()));
    assert_eq!(code, Some(0), "{out}");
}

/// Without the sidecars' spans (their exporter off), the services' own spans still agree
/// with the map: orders' calls reached a stock that received a deadline header, so they
/// carried one although orders' client span captured none (the healthy run warned
/// "deadline dropped" there while the map said "forwards all").
#[test]
fn without_sidecar_spans_the_map_and_the_findings_still_agree() {
    let r = audit_text(&fleet_without_sidecar_spans());
    assert_eq!(r.problems_total, 0, "{:?}", r.problem_kinds);
    assert_the_map_agrees(&r);
    for service in ["web", "orders"] {
        let row = r.rollout.iter().find(|x| x.service == service).unwrap();
        assert_eq!(row.forwards, Forwards::All, "{row:?}");
    }
    assert!(
        of_kind(&r, FindingKind::DeadlineDroppedByHeader).is_empty(),
        "{}",
        verdicts(&r)
    );
}

/// The depth column is the typical depth: orders is the second service of 40 requests and
/// the first of 5 direct calls, so its depth is 2 (its ingress hop 1, counted from 0), not 1.
#[test]
fn the_depth_is_the_median_not_the_shallowest() {
    let r = audit_text(&fleet(|_| Case::default()));
    let depth = |s: &str| r.services.iter().find(|x| x.service == s).unwrap().depth;
    assert_eq!(
        (depth("web"), depth("orders"), depth("stock")),
        (Some(1), Some(2), Some(3)),
        "{:#?}",
        r.services
    );
    let hop = r
        .hops
        .iter()
        .find(|h| h.service == "orders" && h.route == "POST /orders")
        .unwrap();
    assert_eq!(hop.depth, Some(1), "{hop:?}");
    let services: Vec<&str> = r.rollout.iter().map(|x| x.service.as_str()).collect();
    assert_eq!(services, ["web", "orders", "stock"], "by typical depth");
}

/// 12 of 40 requests run into stock's deadline: stock's sidecar ends it at what stock was
/// told, and every caller ends as the 504 climbs back, 10-30 ms (2-4%) before its own
/// budget. None of that is a default timeout, on the hop spans or the services' own.
#[test]
fn spans_that_ended_because_the_deadline_fired_are_no_default_timeout() {
    let text = fleet(|n| Case {
        expires: n % 10 < 3,
        ..Case::default()
    });
    let r = audit_text(&text);
    assert_the_map_agrees(&r);
    let spikes = of_kind(&r, FindingKind::TimeoutSpike);
    assert!(
        spikes.is_empty(),
        "{}",
        spikes
            .iter()
            .map(|f| f.detail.clone() + "\n")
            .collect::<String>()
    );
    assert_eq!(r.exit_status(), 0, "{}", verdicts(&r));
}

/// web's egress tells orders 986 ms when web had 794 left (less the 6 ms it ran: 794):
/// an error naming both hops and the amount, exit status 1, however few the calls.
#[test]
fn a_hop_told_more_than_its_caller_had_is_an_error_naming_both_and_the_amount() {
    let text = fleet(|n| Case {
        web_tells: (n == 5).then_some(986),
        ..Case::default()
    });
    let r = audit_text(&text);
    assert_the_map_agrees(&r);
    let told = of_kind(&r, FindingKind::ToldMoreThanCallerHad);
    assert_eq!(told.len(), 1, "{}", verdicts(&r));
    let f = told[0];
    assert_eq!(f.severity, Severity::Error);
    assert_eq!(
        (f.hop.as_str(), f.related.as_slice()),
        ("orders", &["web".to_owned()][..])
    );
    assert_eq!((f.count, f.of, f.value_ms), (1, 40, Some(986 - 794)));
    assert!(
        f.detail
            .contains("orders was told more than web had left when it called")
            && f.detail.contains("192 ms more (median)"),
        "{}",
        f.detail
    );
    assert_eq!(
        f.example_trace.as_deref(),
        Some(&*format!("{:032x}", 0xa005))
    );
    assert_eq!(r.exit_status(), 1);
    let (code, out) = audit_command("told-more", &text);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("orders was told more than web had left"),
        "{out}"
    );
}

/// web does not pass the trace context on: its egress call matches no inbound request and
/// gets the edge total (986 ms for an 800 ms request). The audit says so, as an error per
/// service and destination, with what to do.
#[test]
fn an_egress_call_that_matched_no_request_is_an_error() {
    let text = fleet(|n| Case {
        web_unmatched: n % 4 == 0,
        ..Case::default()
    });
    let r = audit_text(&text);
    assert_the_map_agrees(&r);
    let unmatched = of_kind(&r, FindingKind::UnmatchedCall);
    assert_eq!(unmatched.len(), 1, "{}", verdicts(&r));
    let f = unmatched[0];
    assert_eq!(f.severity, Severity::Error);
    assert_eq!((f.count, f.of, f.value_ms), (10, 40, Some(986)));
    assert!(
        f.detail.starts_with(
            "outbound call from web to orders matched no inbound request: web does not \
             carry trace context"
        ) && f.detail.contains("traceparent"),
        "{}",
        f.detail
    );
    assert_eq!(r.exit_status(), 1);
    let (code, out) = audit_command("unmatched", &text);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("outbound call from web to orders matched no inbound request"),
        "{out}"
    );
}

/// A forgetful orders sends stock a fresh 5,000 ms; its egress tells stock 627, less than
/// orders had: capped, not a reset (no error, exit 0), and said so for information.
#[test]
fn a_reset_the_sidecar_capped_is_not_a_reset() {
    let text = fleet(|_| Case {
        orders_sends: Some(5_000),
        ..Case::default()
    });
    let r = audit_text(&text);
    assert_the_map_agrees(&r);
    assert!(
        of_kind(&r, FindingKind::BudgetResetByHeader).is_empty(),
        "{}",
        verdicts(&r)
    );
    assert!(of_kind(&r, FindingKind::ToldMoreThanCallerHad).is_empty());
    let capped = of_kind(&r, FindingKind::ResetCapped);
    assert_eq!(capped.len(), 1, "{:#?}", r.findings);
    assert_eq!(capped[0].severity, Severity::Info);
    assert_eq!((capped[0].hop.as_str(), capped[0].count), ("orders", 40));
    assert!(
        capped[0].detail.starts_with(
            "capped, not a reset: orders sent stock a deadline header with more than it had \
             left in 40 of 40 calls"
        ),
        "{}",
        capped[0].detail
    );
    assert_eq!(r.exit_status(), 0, "{}", verdicts(&r));
}

/// Only the sidecars' egress spans were exported (the ingress exporter was filtered out):
/// the unmatched calls are still judged, not "nothing to judge".
#[test]
fn egress_spans_alone_are_something_to_judge() {
    let text: String = (0..5)
        .map(|n| {
            let spans = chain(
                n,
                Case {
                    web_unmatched: true,
                    ..Case::default()
                },
            );
            let egress: Vec<S> = spans
                .into_iter()
                .filter(|s| s.name == "POST orders")
                .map(|s| S { parent: 0, ..s })
                .collect();
            line(n, &egress)
        })
        .collect();
    let r = audit_text(&text);
    assert_eq!(r.nothing_to_judge, None, "{}", audit::render::table(&r));
    assert_eq!(of_kind(&r, FindingKind::UnmatchedCall)[0].count, 5);
    assert_eq!(r.exit_status(), 1);
}
