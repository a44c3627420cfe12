//! `hopbudget proxy --otlp-endpoint` (issue #45 item 3, C26, C14): each hop and each egress
//! call is an OpenTelemetry span in the request's trace, with the budget it was told, sent over
//! OTLP/HTTP; with the collector down or stuck, the proxy keeps serving and counts the spans it
//! drops.
//!
//! Real processes and sockets on loopback: the proxy binary; the service behind it, the
//! destination it calls and the collector are servers in this process. The collector decodes
//! the protobuf bodies with the OTLP messages (`opentelemetry-proto`), so what is checked is what
//! went over the wire; `hopbudget audit --listen` reads the same spans.
//!
//! One file on purpose, over 500 lines: the span tests share the OTLP collector and the trace
//! readers defined here.

use crate::support::proxy;
use crate::support::proxy::serve;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::support::proxy::{PATIENCE, Proxy, get as http_get, read_answer};
use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::get;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::{Span, status::StatusCode};
use prost::Message;
use tokio::io::AsyncWriteExt;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";
/// The span id the service puts on its outbound calls: its own client span.
const SERVICE_SPAN: &str = "b7ad6b7169203331";

/// A span as it arrived, with its resource's `service.name`.
#[derive(Debug, Clone)]
struct Got {
    service: String,
    span: Span,
}

impl Got {
    fn attr(&self, key: &str) -> Option<&Value> {
        self.span
            .attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref()?.value.as_ref())
    }

    fn int(&self, key: &str) -> Option<i64> {
        match self.attr(key) {
            Some(Value::IntValue(n)) => Some(*n),
            other => other.map(|v| panic!("{key} is not an integer: {v:?}")),
        }
    }

    fn text(&self, key: &str) -> Option<&str> {
        match self.attr(key) {
            Some(Value::StringValue(s)) => Some(s),
            other => other.map(|v| panic!("{key} is not a string: {v:?}")),
        }
    }

    fn flag(&self, key: &str) -> Option<bool> {
        match self.attr(key) {
            Some(Value::BoolValue(b)) => Some(*b),
            other => other.map(|v| panic!("{key} is not a bool: {v:?}")),
        }
    }

    fn trace_id(&self) -> String {
        hex(&self.span.trace_id)
    }

    fn parent(&self) -> String {
        hex(&self.span.parent_span_id)
    }

    fn is_error(&self) -> bool {
        self.span
            .status
            .as_ref()
            .is_some_and(|s| s.code == StatusCode::Error as i32)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What a collector received: each span, and each export request as it came.
type Received = (
    Arc<Mutex<Vec<Got>>>,
    Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
);

/// A collector on loopback: takes OTLP/HTTP protobuf posts, keeps their spans.
async fn collector() -> (SocketAddr, Arc<Mutex<Vec<Got>>>) {
    let (addr, (got, _)) = collector_keeping_requests().await;
    (addr, got)
}

/// [`collector`], keeping each export request too.
async fn collector_keeping_requests() -> (SocketAddr, Received) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let keep_requests = requests.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let keep = got.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let keep = keep.clone();
            let keep_requests = keep_requests.clone();
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let keep = keep.clone();
                        let keep_requests = keep_requests.clone();
                        async move {
                            assert_eq!(req.uri().path(), "/v1/traces");
                            assert_eq!(req.headers()["content-type"], "application/x-protobuf");
                            let body = req.into_body().collect().await?.to_bytes();
                            let message = ExportTraceServiceRequest::decode(body).unwrap();
                            keep_requests.lock().unwrap().push(message.clone());
                            let mut keep = keep.lock().unwrap();
                            for resource in message.resource_spans {
                                let service = resource
                                    .resource
                                    .iter()
                                    .flat_map(|r| &r.attributes)
                                    .find(|kv| kv.key == "service.name")
                                    .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                                        Value::StringValue(s) => Some(s.clone()),
                                        _ => None,
                                    })
                                    .unwrap_or_default();
                                for scope in resource.scope_spans {
                                    for span in scope.spans {
                                        keep.push(Got {
                                            service: service.clone(),
                                            span,
                                        });
                                    }
                                }
                            }
                            let mut res = http::Response::new(Full::new(Bytes::new()));
                            res.headers_mut().insert(
                                "content-type",
                                http::HeaderValue::from_static("application/x-protobuf"),
                            );
                            Ok::<_, hyper::Error>(res)
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, (got, requests))
}

/// Where the service's outbound calls go: the proxy's `--egress`, to the destination.
#[derive(Clone, Default)]
struct Ways {
    egress: Arc<OnceLock<SocketAddr>>,
    destination: Arc<OnceLock<SocketAddr>>,
}

/// The service behind the proxy: `/call` calls the destination through the egress with its
/// own span id in the caller's trace (`/byid`: with the caller's `x-request-id` and no trace
/// context) and answers `told=` (what it was told) and the destination's answer (the headers
/// it saw); anything else answers `told=`.
async fn service(ways: Ways) -> SocketAddr {
    let told = |headers: &HeaderMap| {
        headers
            .get("x-request-timeout-ms")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("none")
            .to_owned()
    };
    let call = move |State(ways): State<Ways>, uri: axum::http::Uri, headers: HeaderMap| async move {
        let destination = *ways.destination.get().unwrap();
        let context = if uri.path() == "/byid" {
            let id = headers["x-request-id"].to_str().unwrap();
            format!("x-request-id: {id}")
        } else {
            let inbound = headers["traceparent"].to_str().unwrap();
            let trace = inbound.split('-').nth(1).unwrap();
            format!("traceparent: 00-{trace}-{SERVICE_SPAN}-01")
        };
        let head = format!(
            "GET http://{destination}/echo HTTP/1.1\r\nhost: {destination}\r\n\
                         {context}\r\nconnection: close\r\n\r\n"
        );
        let mut stream = tokio::net::TcpStream::connect(*ways.egress.get().unwrap())
            .await
            .unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        let answer = read_answer(&mut stream).await.unwrap();
        format!(
            "told={}\nparent={}\nstatus={}\n{}",
            told(&headers),
            parent(&headers),
            answer.status,
            answer.body
        )
    };
    // Gives up on its call to the destination's `/slow` after 200 ms, as a client timeout
    // does: the connection to the egress is dropped mid-call.
    let abandon = |State(ways): State<Ways>| async move {
        let destination = *ways.destination.get().unwrap();
        let head = format!(
            "GET http://{destination}/slow HTTP/1.1\r\nhost: {destination}\r\n\
             traceparent: 00-{TRACE_ID}-{SERVICE_SPAN}-01\r\nconnection: close\r\n\r\n"
        );
        let mut stream = tokio::net::TcpStream::connect(*ways.egress.get().unwrap())
            .await
            .unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        let gave_up = tokio::time::timeout(Duration::from_millis(200), read_answer(&mut stream))
            .await
            .is_err();
        format!("gave_up={gave_up}\n")
    };
    let router = Router::new()
        .route("/call", get(call))
        .route("/byid", get(call))
        .route("/abandon", get(abandon))
        .fallback(move |headers: HeaderMap| async move {
            format!("told={}\nparent={}\n", told(&headers), parent(&headers))
        })
        .with_state(ways);
    serve(router).await
}

/// The `traceparent` the service was given, or `none`.
fn parent(headers: &HeaderMap) -> String {
    headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("none")
        .to_owned()
}

/// The destination: `/echo` answers the headers it saw, `/slow` answers after 30 s.
async fn destination() -> SocketAddr {
    serve(
        Router::new()
            .route(
                "/echo",
                get(|headers: HeaderMap| async move { proxy::headers_text(&headers) }),
            )
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    "late"
                }),
            ),
    )
    .await
}

fn value<'a>(body: &'a str, prefix: &str) -> &'a str {
    body.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} in {body}"))
}

fn ms(body: &str, prefix: &str) -> i64 {
    value(body, prefix).parse().unwrap()
}

/// SIGTERM, and wait for the proxy to exit: it sends its last spans before it does.
async fn stop(proxy: &mut Proxy) {
    let status = proxy::terminate(&mut proxy.child).await;
    assert!(status.success(), "{status:?}");
}

/// The spans with `hopbudget.proxy = side` whose `url.path` (ingress) is `path`, or all the
/// egress ones.
fn find<'a>(spans: &'a [Got], side: &str, path: Option<&str>) -> Vec<&'a Got> {
    spans
        .iter()
        .filter(|g| g.text("hopbudget.proxy") == Some(side))
        .filter(|g| path.is_none() || g.text("url.path") == path)
        .collect()
}

#[cfg(unix)]
#[tokio::test]
async fn each_hop_and_egress_call_is_a_span_in_the_callers_trace_with_what_was_told() {
    let _module = crate::support::serial::module(module_path!());
    let (collector, got) = collector().await;
    let ways = Ways::default();
    ways.destination.set(destination().await).unwrap();
    let service = service(ways.clone()).await;
    let endpoint = format!("http://{collector}/v1/traces");
    let profile = "service: orders\nroutes: [{path: /tax, min_budget_ms: 200}]";
    let mut proxy = Proxy::start(
        service,
        Some(profile),
        &[
            "--egress",
            "127.0.0.1:0",
            "--request-id-header",
            "x-request-id",
            "--otlp-endpoint",
            &endpoint,
        ],
    )
    .await;
    ways.egress.set(proxy.egress.unwrap()).unwrap();

    let traceparent = format!("00-{TRACE_ID}-{CALLER_SPAN}-01");
    let caller = [
        ("x-request-timeout-ms", "5000"),
        ("traceparent", traceparent.as_str()),
    ];
    let called = http_get(proxy.addr, "/call", &caller).await.unwrap();
    assert_eq!(called.status, 200, "{called:?}");
    let told_service = ms(&called.body, "told=");
    let told_destination = ms(&called.body, "x-request-timeout-ms: ");
    // A call matched by request id, carrying no trace context of its own.
    let by_id = [
        ("x-request-timeout-ms", "5000"),
        ("traceparent", traceparent.as_str()),
        ("x-request-id", "r-1"),
    ];
    let called_by_id = http_get(proxy.addr, "/byid", &by_id).await.unwrap();
    assert_eq!(called_by_id.status, 200, "{called_by_id:?}");
    // Refused before the service: 100 ms left, the route needs 200 (C3).
    let refuse = [
        ("x-request-timeout-ms", "100"),
        ("traceparent", traceparent.as_str()),
    ];
    let refused = http_get(proxy.addr, "/tax", &refuse).await.unwrap();
    assert_eq!(refused.status, 503, "{refused:?}");
    // No trace context and no deadline: a trace of its own, the edge total.
    let plain = http_get(proxy.addr, "/plain", &[]).await.unwrap();
    assert_eq!(plain.status, 200, "{plain:?}");
    stop(&mut proxy).await;

    let spans = got.lock().unwrap().clone();
    assert!(spans.iter().all(|g| g.service == "orders"), "{spans:#?}");

    // The hop that called out: the child of the caller's span, told what the service saw.
    let [ingress] = find(&spans, "ingress", Some("/call"))[..] else {
        panic!("one ingress span for /call in {spans:#?}");
    };
    assert_eq!(ingress.span.kind, SpanKind::Server as i32);
    assert_eq!(ingress.trace_id(), TRACE_ID);
    assert_eq!(ingress.parent(), CALLER_SPAN);
    assert_eq!(ingress.text("http.request.method"), Some("GET"));
    assert_eq!(ingress.int("http.response.status_code"), Some(200));
    assert_eq!(ingress.text("deadline.source"), Some("relative-ms"));
    assert_eq!(ingress.text("deadline.outcome"), Some("completed"));
    let remaining = ingress.int("deadline.remaining_ms").unwrap();
    let margin = ingress.int("deadline.margin_ms").unwrap();
    assert!(remaining <= 5000 && remaining > 4000, "{ingress:?}");
    assert!(margin > 0, "{ingress:?}");
    assert_eq!(ingress.int("deadline.told_ms"), Some(told_service));
    assert!(told_service <= remaining - margin, "{ingress:?}");
    assert_eq!(ingress.int("deadline.required_ms"), None);
    assert!(!ingress.is_error(), "{ingress:?}");
    // Exported, it is the service's parent (item 1).
    let given = format!("00-{TRACE_ID}-{}-01", hex(&ingress.span.span_id));
    assert_eq!(value(&called.body, "parent="), given);

    // Its egress call: the child of the service's own client span, in the same trace.
    let egresses = find(&spans, "egress", None);
    let [egress] = egresses
        .iter()
        .copied()
        .filter(|g| g.parent() == SERVICE_SPAN)
        .collect::<Vec<_>>()[..]
    else {
        panic!("one egress span under the service's span in {spans:#?}");
    };
    assert_eq!(egress.span.kind, SpanKind::Client as i32);
    assert_eq!(egress.trace_id(), TRACE_ID);
    assert_eq!(egress.parent(), SERVICE_SPAN);
    assert_eq!(egress.flag("deadline.matched"), Some(true));
    assert_eq!(egress.text("deadline.outcome"), Some("completed"));
    assert_eq!(egress.int("deadline.told_ms"), Some(told_destination));
    let remaining = egress.int("deadline.remaining_ms").unwrap();
    assert!(
        told_destination < remaining && remaining <= told_service,
        "{egress:?}"
    );
    assert_eq!(egress.text("server.address"), Some("127.0.0.1"));
    assert_eq!(egress.int("http.response.status_code"), Some(200));
    assert!(!egress.is_error(), "{egress:?}");

    // Without trace context on the call, its parent is the ingress span of its request.
    let [by_id] = find(&spans, "ingress", Some("/byid"))[..] else {
        panic!("one ingress span for /byid in {spans:#?}");
    };
    let [egress] = egresses
        .iter()
        .copied()
        .filter(|g| g.parent() == hex(&by_id.span.span_id))
        .collect::<Vec<_>>()[..]
    else {
        panic!("one egress span under the /byid ingress span in {spans:#?}");
    };
    assert_eq!(egress.trace_id(), TRACE_ID);
    assert_eq!(egress.flag("deadline.matched"), Some(true));
    assert_eq!(egresses.len(), 2, "{spans:#?}");

    // The refusal: what it needed, nothing told, an error.
    let [refused] = find(&spans, "ingress", Some("/tax"))[..] else {
        panic!("one ingress span for /tax in {spans:#?}");
    };
    assert_eq!(refused.trace_id(), TRACE_ID);
    assert_eq!(refused.text("deadline.outcome"), Some("refused"));
    assert_eq!(refused.int("deadline.required_ms"), Some(200));
    assert_eq!(refused.int("http.response.status_code"), Some(503));
    assert_eq!(refused.int("deadline.told_ms"), None);
    assert!(refused.is_error(), "{refused:?}");

    // No traceparent: a new trace, rooted at the sidecar; the edge total's budget.
    let [root] = find(&spans, "ingress", Some("/plain"))[..] else {
        panic!("one ingress span for /plain in {spans:#?}");
    };
    assert_ne!(root.trace_id(), TRACE_ID);
    assert!(root.span.parent_span_id.is_empty(), "{root:?}");
    assert_eq!(root.text("deadline.source"), Some("fallback"));
    assert_eq!(root.int("deadline.told_ms"), Some(ms(&plain.body, "told=")));
    // The service is given this span as its parent: the trace the sidecar started.
    let given = format!("00-{}-{}-01", root.trace_id(), hex(&root.span.span_id));
    assert_eq!(value(&plain.body, "parent="), given);
}

/// The proxy's `/metrics` count of dropped spans for `reason`.
fn dropped(metrics: &str, reason: &str) -> u64 {
    let label = format!("reason=\"{reason}\"");
    metrics
        .lines()
        .filter(|l| l.starts_with("hopbudget_proxy_spans_dropped_total{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Wait until `/metrics` counts a dropped span for `reason`; fails after [`PATIENCE`].
async fn await_dropped(proxy: &Proxy, reason: &str) -> u64 {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let text = proxy.metrics().await;
        let n = dropped(&text, reason);
        if n > 0 {
            return n;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no dropped spans ({reason}) in:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A proxy in front of `service` sending spans to `endpoint`, with the SDK's settings `env`.
async fn proxy_to(endpoint: &str, env: &[(&str, &str)]) -> Proxy {
    let ways = Ways::default();
    let service = service(ways).await;
    let url = format!("http://{endpoint}/v1/traces");
    Proxy::start_with_env(service, None, &["--otlp-endpoint", &url], env).await
}

/// Every request is answered as without spans.
async fn serve_requests(proxy: &Proxy, count: usize) {
    for _ in 0..count {
        let answer = http_get(proxy.addr, "/plain", &[("x-request-timeout-ms", "2000")])
            .await
            .unwrap();
        assert_eq!(answer.status, 200, "{answer:?}");
    }
}

#[tokio::test]
async fn with_the_collector_down_the_proxy_serves_and_counts_the_spans_it_drops() {
    let _module = crate::support::serial::module(module_path!());
    // A port nobody listens on: every export is refused.
    let down = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = down.local_addr().unwrap();
    drop(down);
    let mut proxy = proxy_to(
        &addr.to_string(),
        &[
            ("OTEL_BSP_SCHEDULE_DELAY", "20"),
            ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "200"),
        ],
    )
    .await;
    serve_requests(&proxy, 20).await;
    assert!(await_dropped(&proxy, "export_failed").await >= 1);
    proxy
        .await_log(&[
            "WARN",
            "span export failed",
            &format!("endpoint=http://{addr}/v1/traces"),
        ])
        .await;
    serve_requests(&proxy, 5).await;
}

#[tokio::test]
async fn with_the_collector_stuck_the_queue_stays_bounded_and_drops_are_counted() {
    let _module = crate::support::serial::module(module_path!());
    // A collector that takes connections and never answers: the export in progress waits,
    // and the queue (two spans) fills.
    let stuck = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = stuck.local_addr().unwrap();
    let held = Arc::new(Mutex::new(Vec::new()));
    let hold = held.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = stuck.accept().await {
            hold.lock().unwrap().push(stream);
        }
    });
    let mut proxy = proxy_to(
        &addr.to_string(),
        &[
            ("OTEL_BSP_MAX_QUEUE_SIZE", "2"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1"),
            ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "60000"),
        ],
    )
    .await;
    serve_requests(&proxy, 10).await;
    assert!(await_dropped(&proxy, "queue_full").await >= 1);
    proxy
        .await_log(&[
            "WARN",
            "span queue full",
            "hopbudget_proxy_spans_dropped_total",
        ])
        .await;
    serve_requests(&proxy, 5).await;
}

/// `hopbudget audit --listen` on a free port, its URL, and the child (its stderr drained).
async fn audit_listener() -> (tokio::process::Child, String) {
    use tokio::io::AsyncBufReadExt;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_hopbudget"))
        .args(["audit", "--listen", "127.0.0.1:0", "--json"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let first = tokio::time::timeout(PATIENCE, lines.next_line())
        .await
        .expect("the listening line")
        .unwrap()
        .expect("audit --listen runs");
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {first:?}"))
        .to_owned();
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, url)
}

/// Two requests through a proxy whose spans go to `endpoint` (one calls out through the
/// egress, one does not); the proxy is stopped, so every span has been sent.
async fn two_requests_traced_to(endpoint: &str) {
    let ways = Ways::default();
    ways.destination.set(destination().await).unwrap();
    let service = service(ways.clone()).await;
    let mut proxy = Proxy::start(
        service,
        Some("service: orders"),
        &["--egress", "127.0.0.1:0", "--otlp-endpoint", endpoint],
    )
    .await;
    ways.egress.set(proxy.egress.unwrap()).unwrap();
    let traceparent = format!("00-{TRACE_ID}-{CALLER_SPAN}-01");
    for path in ["/call", "/plain"] {
        let caller = [
            ("x-request-timeout-ms", "5000"),
            ("traceparent", traceparent.as_str()),
        ];
        let answer = http_get(proxy.addr, path, &caller).await.unwrap();
        assert_eq!(answer.status, 200, "{answer:?}");
    }
    stop(&mut proxy).await;
}

/// The audit's JSON report of [`two_requests_traced_to`]: two ingress spans and one egress
/// span, every one of them read with its `deadline.*` fields, none a problem.
fn assert_read_whole(report: &serde_json::Value) {
    assert_eq!(report["input"]["spans"], 3, "{report}");
    assert_eq!(report["problems_total"], 0, "{}", report["problem_kinds"]);
    // The hop's deadline.* attributes were read: the budget it got, how its requests ended.
    let hop = &report["hops"][0];
    assert_eq!(hop["service"], "orders", "{report}");
    assert_eq!(hop["remaining_p50_ms"], 5000, "{report}");
    assert_eq!(hop["completed"], 2, "{report}");
}

#[cfg(unix)]
#[tokio::test]
async fn audit_listen_takes_the_proxys_spans() {
    let _module = crate::support::serial::module(module_path!());
    let (audit, url) = audit_listener().await;
    two_requests_traced_to(&url).await;
    let pid = audit.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = tokio::time::timeout(PATIENCE, audit.wait_with_output())
        .await
        .expect("the audit reports and exits")
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_read_whole(&report);
}

/// The same spans as a Collector writes them with its `file` exporter (OTLP JSON, one export
/// request per line: ids in hex, 64-bit integers as strings, enums as numbers), read back
/// by `hopbudget audit FILE`: what a fleet whose sidecars export to a Collector audits.
#[cfg(unix)]
#[tokio::test]
async fn a_collector_file_of_the_proxys_spans_is_audited_as_audit_listen_does() {
    let _module = crate::support::serial::module(module_path!());
    let (collector, (_, requests)) = collector_keeping_requests().await;
    two_requests_traced_to(&format!("http://{collector}/v1/traces")).await;
    let mut file = String::new();
    for request in requests.lock().unwrap().iter() {
        let mut line = serde_json::to_value(request).unwrap();
        collector_json(&mut line, None);
        file.push_str(&line.to_string());
        file.push('\n');
    }
    assert!(
        file.contains("\"intValue\":\""),
        "64-bit integers as strings:\n{file}"
    );
    let path = std::env::temp_dir().join(format!(
        "hopbudget-proxy-spans-collector-{}.json",
        std::process::id()
    ));
    std::fs::write(&path, &file).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hopbudget"))
        .args(["audit", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_read_whole(&report);
}

/// Rewrite `value`, the serde form of an OTLP message, the way the Collector's protojson
/// writes it: 64-bit integers (`intValue`, the `*UnixNano` times) as strings, as proto3's
/// JSON mapping says.
fn collector_json(value: &mut serde_json::Value, key: Option<&str>) {
    use serde_json::Value as J;
    match value {
        J::Object(map) => {
            for (k, v) in map.iter_mut() {
                collector_json(v, Some(k));
            }
        }
        J::Array(items) => items.iter_mut().for_each(|v| collector_json(v, key)),
        J::Number(n) if key.is_some_and(|k| k == "intValue" || k.ends_with("UnixNano")) => {
            *value = J::String(n.to_string());
        }
        _ => {}
    }
}

#[cfg(unix)]
#[tokio::test]
async fn an_egress_call_the_service_abandons_is_a_cancelled_span() {
    let _module = crate::support::serial::module(module_path!());
    let (collector, got) = collector().await;
    let ways = Ways::default();
    ways.destination.set(destination().await).unwrap();
    let service = service(ways.clone()).await;
    let endpoint = format!("http://{collector}/v1/traces");
    let mut proxy = Proxy::start(
        service,
        None,
        &["--egress", "127.0.0.1:0", "--otlp-endpoint", &endpoint],
    )
    .await;
    ways.egress.set(proxy.egress.unwrap()).unwrap();
    let traceparent = format!("00-{TRACE_ID}-{CALLER_SPAN}-01");
    let caller = [
        ("x-request-timeout-ms", "5000"),
        ("traceparent", traceparent.as_str()),
    ];
    let answer = http_get(proxy.addr, "/abandon", &caller).await.unwrap();
    assert_eq!(answer.body, "gave_up=true\n", "{answer:?}");
    // The hop's line is as without spans: no span context in front of it.
    let line = proxy.await_log(&["hop ended"]).await;
    assert!(
        line.contains(" INFO hopbudget::hop: hop ended service="),
        "{line}"
    );
    stop(&mut proxy).await;

    let spans = got.lock().unwrap().clone();
    let [egress] = find(&spans, "egress", None)[..] else {
        panic!("one egress span in {spans:#?}");
    };
    assert_eq!(egress.parent(), SERVICE_SPAN);
    assert_eq!(egress.text("deadline.outcome"), Some("cancelled"));
    assert_eq!(egress.int("http.response.status_code"), None);
    assert!(egress.is_error(), "{egress:?}");
}

#[tokio::test]
async fn an_export_to_a_collector_that_never_answers_gives_up_at_the_timeout() {
    let _module = crate::support::serial::module(module_path!());
    // It takes the connection and never answers: without a bound on the request, the export
    // would wait forever and no batch would ever be counted as failed.
    let stuck = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = stuck.local_addr().unwrap();
    let held = Arc::new(Mutex::new(Vec::new()));
    let hold = held.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = stuck.accept().await {
            hold.lock().unwrap().push(stream);
        }
    });
    let proxy = proxy_to(
        &addr.to_string(),
        &[
            ("OTEL_BSP_SCHEDULE_DELAY", "20"),
            ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "200"),
        ],
    )
    .await;
    serve_requests(&proxy, 5).await;
    assert!(await_dropped(&proxy, "export_failed").await >= 1);
    serve_requests(&proxy, 5).await;
}

#[tokio::test]
async fn with_spans_on_the_log_lines_inside_a_request_are_as_without_them() {
    let _module = crate::support::serial::module(module_path!());
    // The service is down: the proxy's WARN line is written while the request runs, inside
    // the request's span for the spans, which the log lines do not show.
    let down = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let nobody = down.local_addr().unwrap();
    drop(down);
    let (collector, _got) = collector().await;
    let endpoint = format!("http://{collector}/v1/traces");
    let mut proxy = Proxy::start(nobody, None, &["--otlp-endpoint", &endpoint]).await;
    let answer = http_get(proxy.addr, "/plain", &[]).await.unwrap();
    assert_eq!(answer.status, 502, "{answer:?}");
    let line = proxy.await_log(&["upstream call failed"]).await;
    assert!(
        line.contains(" WARN hopbudget_cli::proxy::answer: upstream call failed"),
        "{line}"
    );
}

#[cfg(unix)]
#[tokio::test]
async fn an_unsampled_request_keeps_its_callers_parent_and_exports_nothing() {
    let _module = crate::support::serial::module(module_path!());
    let (collector, got) = collector().await;
    let service = service(Ways::default()).await;
    let endpoint = format!("http://{collector}/v1/traces");
    // The traces the sidecar starts are sampled at 0: they get ids (for matching), no span.
    let mut proxy = Proxy::start(
        service,
        Some("sidecar: {sample_ratio: 0}"),
        &["--otlp-endpoint", &endpoint],
    )
    .await;
    let unsampled = format!("00-{TRACE_ID}-{CALLER_SPAN}-00");
    let answer = http_get(proxy.addr, "/plain", &[("traceparent", unsampled.as_str())])
        .await
        .unwrap();
    // Not exported, so not named as a parent: the caller's passes unchanged.
    assert_eq!(value(&answer.body, "parent="), unsampled);
    let started = http_get(proxy.addr, "/plain", &[]).await.unwrap();
    let given = value(&started.body, "parent=");
    assert!(
        given.starts_with("00-") && given.ends_with("-00"),
        "{given}"
    );
    assert!(!given.contains(TRACE_ID), "{given}");
    stop(&mut proxy).await;
    let spans = got.lock().unwrap().clone();
    assert!(spans.is_empty(), "{spans:#?}");
}
