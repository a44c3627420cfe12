//! Faults downstream, over real sockets, through every client layer: the reqwest middleware,
//! the tower client layer on hyper-util's `Client`, and the gRPC client layer on tonic's
//! `Channel`.
//!
//! The downstreams are small raw TCP (or raw HTTP/2) servers that misbehave on purpose. What
//! each fault becomes at the calling hop:
//!
//! | downstream | HTTP layers | gRPC layer |
//! |---|---|---|
//! | accepts, never answers | `BudgetError::Expired` at `deadline - margin` (C4) | DEADLINE_EXCEEDED |
//! | resets mid-body | the head arrives; the body read fails with a transport error, not a deadline outcome | UNAVAILABLE / UNKNOWN / INTERNAL, never a deadline code |
//! | answers garbage / oversized headers | a transport error, not a deadline outcome | same |
//! | answers after the deadline | `BudgetError::Expired`; the late answer is never read | DEADLINE_EXCEEDED; the downstream's work is stopped |
//! | a proxy's own 504 while budget remains | the 504 returned as is (an upstream failure), budget untouched | tonic's UNAVAILABLE or INTERNAL, passed through |
//!
//! No work is orphaned: the number of live tokio tasks (the runtime's metrics) returns to its
//! baseline once the client is dropped, so every connection the faults opened was closed, and
//! each misbehaving server saw its connection go away.
#![cfg(all(feature = "axum", feature = "reqwest", feature = "grpc"))]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use hopbudget::http::client::ClientBudgetLayer;
use hopbudget::http::reqwest::budget_error;
use hopbudget::{BudgetError, Profile, RequestBudget};
use http_body_util::{BodyExt, Full};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tower::{ServiceBuilder, ServiceExt};

/// Longest a fault may take to surface before the test calls it a hang (not a speed claim).
const HANG: Duration = Duration::from_secs(10);

/// How a misbehaving downstream treats each connection.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Accept, read, never answer; hold the socket until the peer closes it.
    Silent,
    /// Answer a head promising 100 000 bytes, send 100, then reset the connection.
    ResetMidBody,
    /// Answer bytes that are not HTTP at all.
    Garbage,
    /// Answer a head with a 1 MiB header.
    OversizedHeaders,
    /// Answer 200, but only after this long.
    Late(Duration),
    /// Answer 504 at once, as a proxy whose own upstream timeout fired would.
    Proxy504,
}

/// A running fault server: its address, and how many connections it saw open and closed.
struct FaultServer {
    addr: SocketAddr,
    opened: Arc<AtomicU64>,
    closed: Arc<AtomicU64>,
}

impl FaultServer {
    fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Every connection it accepted has been closed by the client (or reset by the server).
    async fn all_closed(&self) -> bool {
        crate::http_support::eventually(HANG, || {
            self.closed.load(Ordering::SeqCst) == self.opened.load(Ordering::SeqCst)
        })
        .await
    }
}

async fn fault_server(fault: Fault) -> FaultServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let opened = Arc::new(AtomicU64::new(0));
    let closed = Arc::new(AtomicU64::new(0));
    let (o, c) = (opened.clone(), closed.clone());
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            o.fetch_add(1, Ordering::SeqCst);
            let c = c.clone();
            tokio::spawn(async move {
                misbehave(stream, fault).await;
                c.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    FaultServer {
        addr,
        opened,
        closed,
    }
}

/// Read until the end of the request head (or of the stream); whether a head arrived.
async fn read_head(stream: &mut TcpStream) -> bool {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
    true
}

/// Wait until the peer closes (read returns 0 or fails), discarding what it sends.
async fn until_closed(stream: &mut TcpStream) {
    let mut buf = [0u8; 4096];
    while let Ok(n) = stream.read(&mut buf).await {
        if n == 0 {
            return;
        }
    }
}

async fn misbehave(mut stream: TcpStream, fault: Fault) {
    match fault {
        Fault::Silent => until_closed(&mut stream).await,
        Fault::ResetMidBody => {
            if read_head(&mut stream).await {
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n")
                    .await;
                let _ = stream.write_all(&[b'x'; 100]).await;
                let _ = stream.flush().await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            // Zero linger: closing sends RST, not FIN.
            let _ = stream.set_zero_linger();
        }
        Fault::Garbage => {
            read_head(&mut stream).await;
            let _ = stream
                .write_all(b"SSH-2.0-OpenSSH_9.6\r\n\x00\xff\xfe not http at all\r\n\r\n")
                .await;
            until_closed(&mut stream).await;
        }
        Fault::OversizedHeaders => {
            if read_head(&mut stream).await {
                let mut head = b"HTTP/1.1 200 OK\r\nx-big: ".to_vec();
                head.extend(std::iter::repeat_n(b'a', 1 << 20));
                head.extend_from_slice(b"\r\ncontent-length: 0\r\n\r\n");
                let _ = stream.write_all(&head).await;
            }
            until_closed(&mut stream).await;
        }
        Fault::Late(delay) => {
            if read_head(&mut stream).await {
                tokio::time::sleep(delay).await;
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nlate")
                    .await;
            }
            until_closed(&mut stream).await;
        }
        Fault::Proxy504 => {
            while read_head(&mut stream).await {
                let body = b"upstream request timeout";
                let head = format!(
                    "HTTP/1.1 504 Gateway Timeout\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                );
                if stream.write_all(head.as_bytes()).await.is_err()
                    || stream.write_all(body).await.is_err()
                {
                    return;
                }
            }
        }
    }
}

fn profile() -> Profile {
    crate::http_support::profile("service: caller")
}

fn budget(ms: u64) -> RequestBudget {
    RequestBudget::local(Duration::from_millis(ms), profile().policy())
}

fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// Wait until the runtime's live task count is back to `baseline`; the count it settled at.
async fn settle_tasks(baseline: usize) -> usize {
    crate::http_support::eventually(HANG, || alive_tasks() <= baseline).await;
    alive_tasks()
}

/// What one call through a client layer came to.
#[derive(Debug)]
enum Got {
    /// The head arrived with this status; the body read ended like this.
    Response(u16, Result<usize, String>),
    /// A deadline outcome from the layer.
    Budget(BudgetError),
    /// Any other error (transport, protocol).
    Other(#[allow(dead_code, reason = "shown through Debug in assertion messages")] String),
}

async fn via_reqwest(url: &str, budget: &RequestBudget) -> Got {
    let client = crate::http_support::client(&profile());
    let sent = tokio::time::timeout(HANG, client.get(url).with_extension(budget.clone()).send())
        .await
        .expect("the fault surfaced within the guard");
    match sent {
        Ok(res) => {
            let status = res.status().as_u16();
            let body = tokio::time::timeout(HANG, res.bytes())
                .await
                .expect("the body ended within the guard");
            Got::Response(status, body.map(|b| b.len()).map_err(|e| e.to_string()))
        }
        Err(e) => match budget_error(&e) {
            Some(b) => Got::Budget(*b),
            None => Got::Other(format!("{e:?}")),
        },
    }
}

async fn via_tower(url: &str, budget: &RequestBudget) -> Got {
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    let hyper = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let client = ServiceBuilder::new()
        .layer(ClientBudgetLayer::new(profile()))
        .service(hyper);
    let req = http::Request::get(url)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let sent = tokio::time::timeout(HANG, budget.scope(client.oneshot(req)))
        .await
        .expect("the fault surfaced within the guard");
    match sent {
        Ok(res) => {
            let status = res.status().as_u16();
            let body = tokio::time::timeout(HANG, res.into_body().collect())
                .await
                .expect("the body ended within the guard");
            Got::Response(
                status,
                body.map(|b| b.to_bytes().len()).map_err(|e| e.to_string()),
            )
        }
        Err(e) => match BudgetError::find(&*e) {
            Some(b) => Got::Budget(*b),
            None => Got::Other(format!("{e:?}")),
        },
    }
}

/// Run `fault` through both HTTP client layers and hand each result to `check`; then check
/// that nothing is left running and every connection was closed.
async fn each_http_layer(fault: Fault, budget_ms: u64, check: impl Fn(&str, &Got, &RequestBudget)) {
    let server = fault_server(fault).await;
    let baseline = alive_tasks();
    for layer in ["reqwest", "tower"] {
        let budget = budget(budget_ms);
        let got = match layer {
            "reqwest" => via_reqwest(&server.url(), &budget).await,
            _ => via_tower(&server.url(), &budget).await,
        };
        check(layer, &got, &budget);
    }
    assert!(
        server.all_closed().await,
        "{fault:?}: a connection was left open ({} opened, {} closed)",
        server.opened.load(Ordering::SeqCst),
        server.closed.load(Ordering::SeqCst)
    );
    let settled = settle_tasks(baseline).await;
    assert!(
        settled <= baseline,
        "{fault:?}: {settled} live tasks, {baseline} before the calls"
    );
}

fn not_a_deadline_outcome(layer: &str, got: &Got, budget: &RequestBudget) {
    assert!(
        !matches!(got, Got::Budget(_)),
        "{layer}: a transport fault is not a deadline outcome: {got:?}"
    );
    assert_eq!(budget.end_cause(), None, "{layer}: the budget is untouched");
}

#[tokio::test]
async fn a_downstream_that_never_answers_is_expired_at_the_deadline() {
    each_http_layer(Fault::Silent, 300, |layer, got, _| {
        assert!(
            matches!(got, Got::Budget(BudgetError::Expired)),
            "{layer}: {got:?}"
        );
    })
    .await;
}

#[tokio::test]
async fn a_reset_mid_body_is_a_transport_error() {
    each_http_layer(Fault::ResetMidBody, 2_000, |layer, got, budget| {
        match got {
            Got::Response(200, Err(_)) => {}
            other => panic!("{layer}: the head arrives, the body fails: {other:?}"),
        }
        not_a_deadline_outcome(layer, got, budget);
    })
    .await;
}

#[tokio::test]
async fn garbage_and_oversized_heads_are_transport_errors() {
    for fault in [Fault::Garbage, Fault::OversizedHeaders] {
        each_http_layer(fault, 2_000, |layer, got, budget| {
            assert!(matches!(got, Got::Other(_)), "{layer} {fault:?}: {got:?}");
            not_a_deadline_outcome(layer, got, budget);
        })
        .await;
    }
}

#[tokio::test]
async fn an_answer_after_the_deadline_is_expired_never_cancelled() {
    each_http_layer(
        Fault::Late(Duration::from_millis(1_500)),
        300,
        |layer, got, _| {
            assert!(
                matches!(got, Got::Budget(BudgetError::Expired)),
                "{layer}: {got:?}"
            );
        },
    )
    .await;
}

/// The decision for a proxy's own 504: it carries no `x-deadline-outcome` marker and arrives
/// while the caller still has budget to forward, so it is not this request's deadline. It is
/// returned as it is (an upstream failure the handler maps, say to 502) and the budget stays
/// open, so a C6 retry may still spend what is left.
#[tokio::test]
async fn a_proxys_own_504_while_budget_remains_is_an_upstream_failure() {
    each_http_layer(Fault::Proxy504, 2_000, |layer, got, budget| {
        assert!(
            matches!(got, Got::Response(504, Ok(_))),
            "{layer}: returned as is: {got:?}"
        );
        assert_eq!(budget.end_cause(), None);
        assert!(budget.remaining() > Duration::from_millis(1_000), "{layer}");
    })
    .await;
}

// ---- gRPC -------------------------------------------------------------------------------

/// A raw HTTP/2 server that answers every request with HTTP 504 and no `grpc-status`, as an
/// HTTP proxy in front of a gRPC service does when its own upstream timeout fires.
async fn h2_proxy_504() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|_req| async {
                    Ok::<_, Infallible>(
                        http::Response::builder()
                            .status(504)
                            .body(Full::new(Bytes::from_static(b"upstream request timeout")))
                            .unwrap(),
                    )
                });
                let _ =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
            });
        }
    });
    addr
}

async fn grpc_call(url: &str, budget_ms: u64) -> tonic::Status {
    let mut client = crate::grpc_support::grpc_client(&profile(), url);
    let call = crate::grpc_support::budget(budget_ms)
        .scope(client.call(crate::grpc_support::call(&[], 2_000)));
    match tokio::time::timeout(HANG, call)
        .await
        .expect("the fault surfaced within the guard")
    {
        Ok(reply) => panic!("a faulty downstream answered: {reply:?}"),
        Err(status) => status,
    }
}

#[tokio::test]
async fn grpc_faults_keep_deadline_codes_for_deadlines_only() {
    use tonic::Code;
    let baseline = alive_tasks();

    let silent = fault_server(Fault::Silent).await;
    let status = grpc_call(&format!("http://{}", silent.addr), 300).await;
    assert_eq!(
        status.code(),
        Code::DeadlineExceeded,
        "never answers: {status:?}"
    );

    for fault in [Fault::ResetMidBody, Fault::Garbage] {
        let server = fault_server(fault).await;
        let status = grpc_call(&format!("http://{}", server.addr), 2_000).await;
        assert!(
            !matches!(
                status.code(),
                Code::DeadlineExceeded | Code::Cancelled | Code::Ok
            ),
            "{fault:?}: a transport fault, not a deadline outcome: {status:?}"
        );
        assert!(server.all_closed().await, "{fault:?}: connection left open");
    }

    let proxy = h2_proxy_504().await;
    let status = grpc_call(&format!("http://{proxy}"), 2_000).await;
    // tonic reads a non-gRPC 504 as UNAVAILABLE (empty body) or INTERNAL (a text body it
    // tries to decode); either way the layer passes it through as an upstream failure.
    assert!(
        matches!(status.code(), Code::Unavailable | Code::Internal),
        "a proxy's HTTP 504 is not DEADLINE_EXCEEDED: {status:?}"
    );

    // A real gRPC downstream that would answer after the deadline: the caller gets
    // DEADLINE_EXCEEDED, and the downstream's work is stopped, not orphaned (C5, C7).
    let late = crate::grpc_support::serve_profile("late", Profile::default()).await;
    let status = grpc_call(&late.url(), 300).await;
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(
        late.stats
            .wait_for(HANG, |s| s.entered() == 1 && s.live() == 0)
            .await,
        "the late downstream's work still runs: {} live",
        late.stats.live()
    );
    assert!(
        silent.all_closed().await,
        "the silent connection was left open"
    );
    drop(late);
    let settled = settle_tasks(baseline + 4).await;
    assert!(
        settled <= baseline + 4,
        "{settled} live tasks; {baseline} before, plus the four accept loops still serving"
    );
}
