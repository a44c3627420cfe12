//! The service's outbound calls through `hopbudget proxy` (C25, issue #37 item 2): a call is
//! matched to the inbound request it belongs to by the `traceparent` the service forwards,
//! and gets that request's remaining budget minus the margin (C2), even when the service
//! itself forwards no deadline; refused locally below the threshold (C3); no deadline headers
//! to an untrusted destination (C19); a call that matches no request gets the edge total and
//! is counted as missing (C8).
//!
//! Real processes and sockets: the proxy binary; the service behind it and the destination
//! it calls are axum servers in this process; the service's outbound calls are raw HTTP/1.1,
//! through `--egress` (an HTTP proxy, absolute-form URI) or `--egress-to` (one listener per
//! destination).

use crate::support::proxy;
use crate::support::proxy::serve;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::support::proxy::{Proxy, get as http_get, read_answer};
use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::get;
use tokio::io::AsyncWriteExt;

/// The destination the service calls: reports the headers it saw, counts calls.
async fn destination() -> (SocketAddr, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let slow_counter = calls.clone();
    let router = Router::new()
        .route(
            "/echo",
            get(move |headers: HeaderMap| {
                let counter = counter.clone();
                async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    proxy::headers_text(&headers)
                }
            }),
        )
        // Answers after 5 s: longer than any budget here.
        .route(
            "/slow",
            get(move || {
                let counter = slow_counter.clone();
                async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    "late"
                }
            }),
        );
    (serve(router).await, calls)
}

/// Where the service's outbound calls go; known once the proxy has started.
#[derive(Clone, Default)]
struct Ways {
    egress: Arc<OnceLock<SocketAddr>>,
    egress_to: Arc<OnceLock<SocketAddr>>,
    destination: Arc<OnceLock<SocketAddr>>,
}

/// The service behind the proxy, as a forgetful one written in any language: it forwards the
/// trace context (its tracing library does) but no deadline. `/call` query: `via=proxy|to`,
/// `sleep=MS` before calling, `trace=no` to forward no trace context, `own=MS` to put its own
/// `x-request-timeout-ms` on the call. Answers `told=<what it was told>` and the call's
/// answer: `status=N` and the destination's body.
async fn service(ways: Ways) -> SocketAddr {
    let router = Router::new()
        .route(
            "/call",
            get(
                |State(ways): State<Ways>, uri: axum::http::Uri, headers: HeaderMap| async move {
                    let q: HashMap<String, String> = uri
                        .query()
                        .unwrap_or_default()
                        .split('&')
                        .filter_map(|kv| kv.split_once('='))
                        .map(|(k, v)| (k.to_owned(), v.to_owned()))
                        .collect();
                    let told = headers
                        .get("x-request-timeout-ms")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("none")
                        .to_owned();
                    let trace_seen = headers
                        .get("traceparent")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("none")
                        .to_owned();
                    if let Some(ms) = q.get("sleep") {
                        tokio::time::sleep(Duration::from_millis(ms.parse().unwrap())).await;
                    }
                    let destination = *ways.destination.get().unwrap();
                    let (addr, target) = if q.get("via").map(String::as_str) == Some("to") {
                        (*ways.egress_to.get().unwrap(), "/echo".to_owned())
                    } else {
                        (
                            *ways.egress.get().unwrap(),
                            format!("http://{destination}/echo"),
                        )
                    };
                    let mut head = format!("GET {target} HTTP/1.1\r\nhost: {destination}\r\n");
                    if q.get("trace").map(String::as_str) != Some("no") {
                        // The caller's trace id, a span id of the service's own.
                        let inbound = headers["traceparent"].to_str().unwrap();
                        let trace = inbound.split('-').nth(1).unwrap();
                        head.push_str(&format!("traceparent: 00-{trace}-b7ad6b7169203331-01\r\n"));
                    }
                    if let Some(own) = q.get("own") {
                        head.push_str(&format!("x-request-timeout-ms: {own}\r\n"));
                    }
                    head.push_str("connection: close\r\n\r\n");
                    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
                    stream.write_all(head.as_bytes()).await.unwrap();
                    let answer = read_answer(&mut stream).await.unwrap();
                    let mut text = format!(
                        "told={told}\ntraceparent={trace_seen}\nstatus={}\n",
                        answer.status
                    );
                    for (name, value) in &answer.headers {
                        text.push_str(&format!("answer {name}: {value}\n"));
                    }
                    text.push_str(&answer.body);
                    text
                },
            ),
        )
        .with_state(ways);
    serve(router).await
}

/// A service, a destination and a proxy with both kinds of egress in front of them.
async fn setup(profile: Option<&str>) -> (Proxy, Arc<AtomicUsize>) {
    setup_with(profile, &[]).await
}

/// [`setup`], with `extra` arguments for the proxy.
async fn setup_with(profile: Option<&str>, extra: &[&str]) -> (Proxy, Arc<AtomicUsize>) {
    let ways = Ways::default();
    let (destination, calls) = destination().await;
    ways.destination.set(destination).unwrap();
    let service = service(ways.clone()).await;
    let to = format!("127.0.0.1:0={destination}");
    let args = [&["--egress", "127.0.0.1:0", "--egress-to", &to][..], extra].concat();
    let proxy = Proxy::start(service, profile, &args).await;
    ways.egress.set(proxy.egress.unwrap()).unwrap();
    ways.egress_to.set(proxy.egress_to[0]).unwrap();
    (proxy, calls)
}

const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// A value in the service's answer: `told=`, `status=`, or a header the destination saw.
fn line<'a>(body: &'a str, prefix: &str) -> Option<&'a str> {
    body.lines().find_map(|l| l.strip_prefix(prefix))
}

fn ms(body: &str, prefix: &str) -> u64 {
    line(body, prefix)
        .unwrap_or_else(|| panic!("no {prefix:?} in {body}"))
        .parse()
        .unwrap()
}

#[tokio::test]
async fn an_outbound_call_gets_the_remaining_budget_of_its_request_by_trace_context() {
    let _module = crate::support::serial::module(module_path!());
    let (proxy, calls) = setup(None).await;
    for via in ["proxy", "to"] {
        let path = format!("/call?via={via}");
        let caller = [("x-request-timeout-ms", "5000"), ("traceparent", TRACE)];
        let answer = http_get(proxy.addr, &path, &caller).await.unwrap();
        assert_eq!(answer.status, 200, "{answer:?}");
        let body = &answer.body;
        assert_eq!(line(body, "status="), Some("200"), "{body}");
        // The service forwarded no deadline; the proxy restated its request's (C25), not the
        // 1000 ms edge total. It shrinks hop by hop: the destination is told at least the
        // margin less than the service was (C2).
        let told_service = ms(body, "told=");
        let told_destination = ms(body, "x-request-timeout-ms: ");
        assert!(told_service <= 4994 && told_service > 4000, "{body}");
        assert!(told_destination > 4000, "{body}");
        assert!(told_destination + 6 <= told_service, "{body}");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_call_matching_no_request_gets_the_edge_total_and_is_counted_missing() {
    let _module = crate::support::serial::module(module_path!());
    let (proxy, _) = setup(None).await;
    let caller = [("x-request-timeout-ms", "20000"), ("traceparent", TRACE)];
    let answer = http_get(proxy.addr, "/call?trace=no", &caller)
        .await
        .unwrap();
    let body = &answer.body;
    assert_eq!(line(body, "status="), Some("200"), "{body}");
    // The default profile's edge total is 1000 ms, far below the caller's 20 s (C8).
    let told = ms(body, "x-request-timeout-ms: ");
    assert!(told <= 994, "{body}");
    let metrics = proxy.metrics().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("hopbudget_deadline_missing_total{")
                && l.contains("route=\"(outbound)\"")
                // By callee: the destination is on loopback, which the profile trusts.
                && l.contains("callee=\"loopback\"")
                && l.ends_with(" 1")),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_call_with_too_little_left_is_refused_before_it_leaves() {
    let _module = crate::support::serial::module(module_path!());
    // The service spends 1000 ms of a 1200 ms budget before calling out: what is left cannot
    // cover the 500 ms threshold, and the proxy refuses without calling the destination (C3).
    let (proxy, calls) = setup(Some("refuse_below_ms: 500")).await;
    let caller = [("x-request-timeout-ms", "1200"), ("traceparent", TRACE)];
    let answer = http_get(proxy.addr, "/call?sleep=1000", &caller)
        .await
        .unwrap();
    let body = &answer.body;
    assert_eq!(line(body, "status="), Some("503"), "{body}");
    assert_eq!(
        line(body, "answer x-deadline-required-ms: "),
        Some("500"),
        "{body}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn the_services_own_tighter_deadline_on_a_call_wins() {
    let _module = crate::support::serial::module(module_path!());
    let (proxy, _) = setup(None).await;
    let caller = [("x-request-timeout-ms", "5000"), ("traceparent", TRACE)];
    let answer = http_get(proxy.addr, "/call?own=300", &caller)
        .await
        .unwrap();
    let told = ms(&answer.body, "x-request-timeout-ms: ");
    assert!(told <= 294 && told > 0, "{}", answer.body);
}

#[tokio::test]
async fn an_untrusted_destination_gets_no_deadline_header() {
    let _module = crate::support::serial::module(module_path!());
    // Only `*.internal` is trusted: the destination on 127.0.0.1 is a third party (C19).
    let (proxy, calls) = setup(Some("outbound: {trusted_hosts: ['*.internal']}")).await;
    let caller = [("x-request-timeout-ms", "2000"), ("traceparent", TRACE)];
    for via in ["proxy", "to"] {
        let path = format!("/call?via={via}&own=700");
        let answer = http_get(proxy.addr, &path, &caller).await.unwrap();
        let body = &answer.body;
        assert_eq!(line(body, "status="), Some("200"), "{body}");
        for header in ["x-request-timeout-ms", "grpc-timeout", "x-request-deadline"] {
            assert_eq!(line(body, &format!("{header}: ")), None, "{body}");
        }
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

/// A gateway's client usually sends a deadline and no `traceparent`. The ingress starts the
/// trace (C26): the service sees a valid one, carries it on its call as any OpenTelemetry SDK
/// does, and the call is matched, so the destination is told less than the service was, not
/// the 1000 ms edge total (issue #45: 986 ms for an 800 ms request).
#[tokio::test]
async fn without_a_traceparent_from_the_client_the_call_still_gets_its_requests_budget() {
    let _module = crate::support::serial::module(module_path!());
    let (proxy, calls) = setup(None).await;
    for via in ["proxy", "to"] {
        let path = format!("/call?via={via}");
        let answer = http_get(proxy.addr, &path, &[("x-request-timeout-ms", "800")])
            .await
            .unwrap();
        assert_eq!(answer.status, 200, "{answer:?}");
        let body = &answer.body;
        let started = line(body, "traceparent=").unwrap();
        assert_eq!(started.len(), 55, "a W3C traceparent: {body}");
        assert!(
            started.starts_with("00-") && started.ends_with("-01"),
            "{body}"
        );
        let told_service = ms(body, "told=");
        let told_destination = ms(body, "x-request-timeout-ms: ");
        assert!(told_service <= 794, "{body}");
        assert!(
            told_destination + 6 <= told_service,
            "never more than the caller had: {body}"
        );
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let metrics = proxy.metrics().await;
    assert!(
        !metrics.contains("route=\"(outbound)\""),
        "no call went unmatched: {metrics}"
    );
}

/// `sidecar.unmatched: refuse`: a call the sidecar cannot match is refused before any
/// connection, with an answer that says what to do, and counted (C26).
#[tokio::test]
async fn an_unmatched_call_can_be_refused_and_is_counted() {
    let _module = crate::support::serial::module(module_path!());
    let (proxy, calls) = setup(Some("sidecar: {unmatched: refuse}")).await;
    let caller = [("x-request-timeout-ms", "5000"), ("traceparent", TRACE)];
    let answer = http_get(proxy.addr, "/call?trace=no", &caller)
        .await
        .unwrap();
    let body = &answer.body;
    assert_eq!(line(body, "status="), Some("503"), "{body}");
    assert!(
        body.contains("forward the inbound request's traceparent"),
        "{body}"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "refused before any connection"
    );
    let metrics = proxy.metrics().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("hopbudget_deadline_missing_total{")
                && l.contains("route=\"(outbound)\"")
                // By callee: the destination is on loopback, which the profile trusts.
                && l.contains("callee=\"loopback\"")
                && l.ends_with(" 1")),
        "{metrics}"
    );
}

/// `sidecar.unmatched: no-deadline`: sent on with no deadline header at all.
#[tokio::test]
async fn an_unmatched_call_can_be_sent_without_a_deadline() {
    let _module = crate::support::serial::module(module_path!());
    let (proxy, calls) = setup(Some("sidecar: {unmatched: no-deadline}")).await;
    let caller = [("x-request-timeout-ms", "5000"), ("traceparent", TRACE)];
    let answer = http_get(proxy.addr, "/call?trace=no&own=700", &caller)
        .await
        .unwrap();
    let body = &answer.body;
    assert_eq!(line(body, "status="), Some("200"), "{body}");
    for header in ["x-request-timeout-ms", "grpc-timeout", "x-request-deadline"] {
        assert_eq!(line(body, &format!("{header}: ")), None, "{body}");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// By default an unmatched call gets the edge total, and is never silent: a WARN line names
/// the service and the destination (C26).
#[tokio::test]
async fn an_unmatched_call_is_logged_at_warn_with_its_destination() {
    let _module = crate::support::serial::module(module_path!());
    let (mut proxy, _) = setup(None).await;
    let caller = [("x-request-timeout-ms", "5000"), ("traceparent", TRACE)];
    let answer = http_get(proxy.addr, "/call?trace=no", &caller)
        .await
        .unwrap();
    assert_eq!(
        line(&answer.body, "status="),
        Some("200"),
        "{}",
        answer.body
    );
    let warned = proxy
        .await_log(&["WARN", "matched no inbound request", "destination="])
        .await;
    assert!(warned.contains("unmatched=EdgeTotal"), "{warned}");
}

/// A caller that gives up on an egress call (`curl -m 0.3`) still leaves its one
/// `egress call ended` line, as `cancelled` (issue #45 item 7).
#[tokio::test]
async fn an_abandoned_egress_call_leaves_its_line_as_cancelled() {
    let _module = crate::support::serial::module(module_path!());
    let (mut proxy, calls) = setup(None).await;
    let destination = {
        // The destination is the one `setup` started: find it through a matched call.
        let caller = [("x-request-timeout-ms", "5000"), ("traceparent", TRACE)];
        let answer = http_get(proxy.addr, "/call", &caller).await.unwrap();
        line(&answer.body, "host: ").unwrap().to_owned()
    };
    let egress = proxy.egress.unwrap();
    let mut stream = tokio::net::TcpStream::connect(egress).await.unwrap();
    let head = format!(
        "GET http://{destination}/slow HTTP/1.1\r\nhost: {destination}\r\ntraceparent: {TRACE}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // Wait until the destination has the call, then leave.
    let deadline = tokio::time::Instant::now() + proxy::PATIENCE;
    while calls.load(Ordering::SeqCst) < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the call never arrived"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(stream);
    let line = proxy
        .await_log(&["egress call ended", "outcome=\"cancelled\""])
        .await;
    assert!(line.contains("matched=false"), "{line}");
}

/// The egress is not an open proxy (#46 item 8): with `--egress-allow`, a destination not on
/// the list is refused with 403 and never called; one on it is called as usual. An
/// `--egress-to` destination is the operator's own choice and needs no listing.
#[tokio::test]
async fn with_an_allow_list_the_egress_calls_nothing_else() {
    let _module = crate::support::serial::module(module_path!());
    let caller = [("x-request-timeout-ms", "2000"), ("traceparent", TRACE)];
    let (proxy, calls) = setup_with(
        None,
        &[
            "--egress-allow",
            "127.0.0.1:1",
            "--egress-allow",
            "*.internal",
        ],
    )
    .await;
    let answer = http_get(proxy.addr, "/call?via=proxy", &caller)
        .await
        .unwrap();
    let body = &answer.body;
    assert_eq!(line(body, "status="), Some("403"), "{body}");
    assert!(body.contains("is not in the egress allow-list"), "{body}");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    let answer = http_get(proxy.addr, "/call?via=to", &caller).await.unwrap();
    assert_eq!(
        line(&answer.body, "status="),
        Some("200"),
        "{}",
        answer.body
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    let (proxy, calls) = setup_with(None, &["--egress-allow", "127.0.0.1"]).await;
    let answer = http_get(proxy.addr, "/call?via=proxy", &caller)
        .await
        .unwrap();
    assert_eq!(
        line(&answer.body, "status="),
        Some("200"),
        "{}",
        answer.body
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}
