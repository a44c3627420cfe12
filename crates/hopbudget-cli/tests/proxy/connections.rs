//! `hopbudget proxy`'s connections to the service (#37 item 5): an HTTP/1.1 caller's requests
//! share one connection to the service, as nginx's upstream `keepalive` pairs them; a request
//! ended at its deadline closes its connection (C4, C7) and the caller's next request opens
//! another; a connection the service closed is replaced; an idle one is reused by the next
//! caller. The service is hyper's own HTTP/1.1 server, counting the connections it accepts
//! and the ones that ended; the caller is hyper's HTTP/1.1 client on one keep-alive
//! connection.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use crate::support::proxy;
use crate::support::proxy::{PATIENCE, Proxy};
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

/// What the service has seen.
#[derive(Default)]
struct Seen {
    accepted: AtomicUsize,
    ended: AtomicUsize,
    changed: Notify,
}

impl Seen {
    /// Wait until `ended` connections have ended.
    async fn await_ended(&self, ended: usize) {
        tokio::time::timeout(PATIENCE, async {
            loop {
                let changed = self.changed.notified();
                if self.ended.load(Ordering::SeqCst) >= ended {
                    return;
                }
                changed.await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{ended} connections to the service end"));
    }
}

/// A body that sends one chunk, then nothing, ever.
struct Stall(bool);

impl hyper::body::Body for Stall {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        if self.0 {
            return Poll::Pending;
        }
        self.0 = true;
        Poll::Ready(Some(Ok(hyper::body::Frame::data(Bytes::from_static(
            b"first chunk\n",
        )))))
    }
}

/// A hyper HTTP/1.1 service: `/ok` answers `ok`, `/slow` too after 200 ms, `/hang` never answers, `/stall` sends its
/// head and one chunk of its body, then nothing. With `keep_alive` false it closes each
/// connection after one answer.
async fn service(keep_alive: bool) -> (SocketAddr, Arc<Seen>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let counts = seen.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            counts.accepted.fetch_add(1, Ordering::SeqCst);
            let counts = counts.clone();
            tokio::spawn(async move {
                let handler = service_fn(|req: hyper::Request<hyper::body::Incoming>| async move {
                    let body = match req.uri().path() {
                        "/hang" => std::future::pending().await,
                        "/slow" => {
                            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                            BoxBody::new(Full::new(Bytes::from_static(b"ok")))
                        }
                        "/stall" => BoxBody::new(Stall(false)),
                        _ => BoxBody::new(Full::new(Bytes::from_static(b"ok"))),
                    };
                    Ok::<_, Infallible>(hyper::Response::new(body))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .keep_alive(keep_alive)
                    .serve_connection(TokioIo::new(stream), handler)
                    .await;
                counts.ended.fetch_add(1, Ordering::SeqCst);
                counts.changed.notify_waiters();
            });
        }
    });
    (addr, seen)
}

/// One keep-alive HTTP/1.1 connection to the proxy.
async fn caller(proxy: SocketAddr) -> SendRequest<Empty<Bytes>> {
    let stream = tokio::net::TcpStream::connect(proxy).await.unwrap();
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    sender
}

/// A GET on `sender` with `budget_ms`; its status.
async fn get(sender: &mut SendRequest<Empty<Bytes>>, path: &str, budget_ms: u32) -> u16 {
    sender
        .ready()
        .await
        .expect("the caller's connection is open");
    let req = hyper::Request::get(path)
        .header("host", "proxy")
        .header("x-request-timeout-ms", budget_ms.to_string())
        .body(Empty::new())
        .unwrap();
    let res = tokio::time::timeout(PATIENCE, sender.send_request(req))
        .await
        .expect("the proxy answers")
        .expect("the proxy answers on the same connection");
    let status = res.status().as_u16();
    res.into_body().collect().await.unwrap();
    status
}

#[tokio::test]
async fn an_http1_callers_requests_share_one_connection_to_the_service() {
    let _module = crate::support::serial::module(module_path!());
    let (service, seen) = service(true).await;
    let proxy = Proxy::start(service, None, &["--no-hop-log"]).await;
    let mut a = caller(proxy.addr).await;
    for _ in 0..5 {
        assert_eq!(get(&mut a, "/ok", 5000).await, 200);
    }
    assert_eq!(
        seen.accepted.load(Ordering::SeqCst),
        1,
        "one connection for 5 requests"
    );
    // A second caller at the same time gets its own.
    let mut b = caller(proxy.addr).await;
    assert_eq!(get(&mut b, "/ok", 5000).await, 200);
    assert_eq!(get(&mut a, "/ok", 5000).await, 200);
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 2);
    assert_eq!(seen.ended.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_idle_connection_passes_to_the_next_caller() {
    let _module = crate::support::serial::module(module_path!());
    let (service, seen) = service(true).await;
    let proxy = Proxy::start(service, None, &["--no-hop-log"]).await;
    // A raw caller that says goodbye (`connection: close`) and reads until the proxy has
    // closed the connection: the proxy has then let go of it, and its connection to the
    // service is idle. (Not a half-close: a caller whose side of the connection ends is a
    // caller gone, C5, as nginx takes it too.)
    let mut raw = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    raw.write_all(
        b"GET /ok HTTP/1.1\r\nhost: proxy\r\nconnection: close\r\nx-request-timeout-ms: 5000\r\n\r\n",
    )
    .await
    .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(PATIENCE, raw.read_to_end(&mut answer))
        .await
        .expect("the proxy answers and closes")
        .unwrap();
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
    let mut next = caller(proxy.addr).await;
    assert_eq!(get(&mut next, "/ok", 5000).await, 200);
    assert_eq!(
        seen.accepted.load(Ordering::SeqCst),
        1,
        "the next caller's request went on the idle connection"
    );
}

#[tokio::test]
async fn a_request_ended_at_its_deadline_closes_its_connection_and_the_next_opens_another() {
    let _module = crate::support::serial::module(module_path!());
    let (service, seen) = service(true).await;
    let proxy = Proxy::start(service, None, &["--no-hop-log"]).await;
    let mut a = caller(proxy.addr).await;
    assert_eq!(get(&mut a, "/ok", 5000).await, 200);
    assert_eq!(get(&mut a, "/hang", 300).await, 504);
    // The service sees the connection its request was on close: what Go's `r.Context()`
    // and every HTTP/1.1 framework watch (C7).
    seen.await_ended(1).await;
    // The caller's connection stays open, and its next request goes on a new connection.
    assert_eq!(get(&mut a, "/ok", 5000).await, 200);
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_connection_the_service_closes_is_replaced() {
    let _module = crate::support::serial::module(module_path!());
    let (service, seen) = service(false).await;
    let proxy = Proxy::start(service, None, &["--no-hop-log"]).await;
    let mut a = caller(proxy.addr).await;
    for _ in 0..3 {
        assert_eq!(get(&mut a, "/ok", 5000).await, 200);
    }
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 3);
    let metrics = proxy.await_outcome("completed", 3).await;
    assert_eq!(proxy::hops(&metrics, "expired"), 0, "{metrics}");
}

#[tokio::test]
async fn a_caller_who_leaves_mid_answer_does_not_hold_up_the_next_caller() {
    let _module = crate::support::serial::module(module_path!());
    let (service, seen) = service(true).await;
    let proxy = Proxy::start(service, None, &["--no-hop-log"]).await;
    // The service sends a head and a first chunk, then stalls; the caller reads the head and
    // leaves. Its connection to the service cannot be reused (the answer never ended).
    let mut a = caller(proxy.addr).await;
    a.ready().await.unwrap();
    let req = hyper::Request::get("/stall")
        .header("host", "proxy")
        .header("x-request-timeout-ms", "20000")
        .body(Empty::new())
        .unwrap();
    let res = tokio::time::timeout(PATIENCE, a.send_request(req))
        .await
        .expect("the head comes")
        .unwrap();
    assert_eq!(res.status(), 200);
    drop(res);
    drop(a);
    // The connection it was on ends (the caller gone, C5), and the next caller is answered
    // at once, on another, well inside its budget.
    seen.await_ended(1).await;
    let mut b = caller(proxy.addr).await;
    assert_eq!(get(&mut b, "/ok", 20000).await, 200);
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 2);
}

/// One h2c caller's 40 streams at once to an HTTP/1.1 service open a connection each; once
/// they are idle, `--upstream-idle-timeout` closes every one (#46 item 3). Without a timer
/// in hyper-util's pool they stayed open for ever.
#[tokio::test]
async fn pooled_connections_to_the_service_close_when_idle() {
    let _module = crate::support::serial::module(module_path!());
    let (service, seen) = service(true).await;
    let running = Proxy::start(service, None, &["--upstream-idle-timeout", "0.5"]).await;
    let proxy = running.addr;
    let stream = tokio::net::TcpStream::connect(proxy).await.unwrap();
    let (sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    let calls = (0..40).map(|_| {
        let mut sender = sender.clone();
        async move {
            let req = hyper::Request::get(format!("http://{proxy}/slow"))
                .header("x-request-timeout-ms", "5000")
                .body(Empty::<Bytes>::new())
                .unwrap();
            let res = sender.send_request(req).await.unwrap();
            assert_eq!(res.status(), 200);
            res.into_body().collect().await.unwrap();
        }
    });
    tokio::time::timeout(PATIENCE, futures_join_all(calls))
        .await
        .expect("the proxy answers every stream");
    let opened = seen.accepted.load(Ordering::SeqCst);
    assert!(
        opened > 1,
        "one connection per stream at once, {opened} opened"
    );
    seen.await_ended(opened).await;
}

/// Run `futures` to completion side by side.
async fn futures_join_all<F: std::future::Future<Output = ()> + Send + 'static>(
    futures: impl Iterator<Item = F>,
) {
    let mut set = tokio::task::JoinSet::new();
    for f in futures {
        set.spawn(f);
    }
    while let Some(done) = set.join_next().await {
        done.unwrap();
    }
}
