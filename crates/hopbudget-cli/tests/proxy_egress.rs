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

#[path = "proxy_support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::get;
use support::{Proxy, get as http_get, read_answer};
use tokio::io::AsyncWriteExt;

/// The destination the service calls: reports the headers it saw, counts calls.
async fn destination() -> (SocketAddr, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let router = Router::new().route(
        "/echo",
        get(move |headers: HeaderMap| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                let mut text = String::new();
                for (name, value) in &headers {
                    text.push_str(&format!("{name}: {}\n", value.to_str().unwrap_or("?")));
                }
                text
            }
        }),
    );
    (serve(router).await, calls)
}

async fn serve(router: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
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
                    let mut text = format!("told={told}\nstatus={}\n", answer.status);
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
    let ways = Ways::default();
    let (destination, calls) = destination().await;
    ways.destination.set(destination).unwrap();
    let service = service(ways.clone()).await;
    let to = format!("127.0.0.1:0={destination}");
    let proxy = Proxy::start(
        service,
        profile,
        &["--egress", "127.0.0.1:0", "--egress-to", &to],
    )
    .await;
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
                && l.ends_with(" 1")),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_call_with_too_little_left_is_refused_before_it_leaves() {
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
