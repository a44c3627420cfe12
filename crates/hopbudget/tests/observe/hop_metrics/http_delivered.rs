//! An answer delivered in full is `completed`, whatever hyper or axum does with its body
//! afterwards (C17, C14); only a body dropped with bytes still to send is `cancelled` (C5).
//!
//! hyper and axum drop bodies they delivered in full without polling them to their end: the
//! body of every `HEAD` answer (axum swaps it for an empty one; hyper never polls it), and an
//! HTTP/1.1 body once its `Content-Length` is reached, a single-chunk stream among them. Each
//! case here is a real axum or hyper server on loopback and a real client; the outcome is
//! read from the Prometheus recorder, as a dashboard would read it.
//!
//! The binary installs the process-wide metrics recorder once; each test has its own service
//! name, so the tests can run in parallel.
#![cfg(all(feature = "axum", feature = "prometheus"))]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use futures_util::StreamExt;
use hopbudget::Profile;
use hopbudget::http::server::{ServerBudget, ServerBudgetLayer};
use http_body::Frame;
use http_body_util::{Full, StreamBody};

use crate::metrics_support::recorder;

/// `hopbudget_hops_total` for one service, route and outcome (0 when absent).
fn hops(service: &str, route: &str, outcome: &str) -> u64 {
    let series = format!(
        "hopbudget_hops_total{{service=\"{service}\",route=\"{route}\",outcome=\"{outcome}\"}} "
    );
    recorder()
        .render()
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .map_or(0, |v| v.parse().unwrap())
}

/// Wait (real time) until `service`'s hops on `route` have `n` outcomes in all, then return
/// them as (completed, cancelled, other).
async fn settled(service: &str, route: &str, n: u64) -> (u64, u64, u64) {
    let read = || {
        let completed = hops(service, route, "completed");
        let cancelled = hops(service, route, "cancelled");
        let rest = hops(service, route, "expired") + hops(service, route, "refused");
        (completed, cancelled, rest)
    };
    let end = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (c, x, r) = read();
        if c + x + r >= n || tokio::time::Instant::now() >= end {
            return read();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn profile(service: &str) -> Profile {
    Profile::from_yaml(
        &format!("service: {service}\nroutes:\n  - path: /stream\n  - path: /fail\n"),
        "t.yaml",
    )
    .unwrap()
}

/// A body of `chunks`, each handed over at once; its end is only known after the last one
/// (a stream's size hint is unknown, and `is_end_stream` stays false until it is polled
/// again).
type Chunks =
    StreamBody<futures_util::stream::BoxStream<'static, Result<Frame<Bytes>, Infallible>>>;

fn chunks(parts: &'static [&'static [u8]]) -> Chunks {
    StreamBody::new(
        futures_util::stream::iter(parts.iter().map(|p| Ok(Frame::data(Bytes::from_static(p)))))
            .boxed(),
    )
}

/// A body that declares `len` bytes, hands over one chunk every 5 ms and never finishes on
/// its own: the client leaves mid-way.
fn endless() -> Chunks {
    StreamBody::new(
        futures_util::stream::unfold((), |()| async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            Some((Ok(Frame::data(Bytes::from(vec![b'x'; 1024]))), ()))
        })
        .boxed(),
    )
}

/// Serve `service` over plain hyper HTTP/1.1, no axum in between: the layer's body is the one
/// hyper writes and drops.
async fn serve_hyper<S>(service: S) -> SocketAddr
where
    S: tower::Service<
            http::Request<hyper::body::Incoming>,
            Response = http::Response<hopbudget::http::server::ResponseBody<Chunks>>,
            Error = Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = service.clone();
            let service = hyper::service::service_fn(move |req| {
                tower::ServiceExt::oneshot(service.clone(), req)
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// The answers of `serve_hyper`'s service, by path.
fn answer(req: &http::Request<hyper::body::Incoming>) -> http::Response<Chunks> {
    let length =
        |n: usize| http::Response::builder().header(http::header::CONTENT_LENGTH, n.to_string());
    match req.uri().path() {
        // Two chunks, then the declared length is reached: hyper stops there.
        "/stream" => length(10).body(chunks(&[b"hello", b"world"])).unwrap(),
        // One chunk that is the whole answer.
        "/once" => length(5).body(chunks(&[b"whole"])).unwrap(),
        // A megabyte declared, sent slowly: the client leaves long before the end.
        "/endless" => length(1 << 20).body(endless()).unwrap(),
        _ => http::Response::new(chunks(&[b"ok"])),
    }
}

/// Every `HEAD` on an axum route is `completed`: axum swaps the answer's body for an empty
/// one, dropping the layer's body unpolled. A load balancer's probe is no cancellation.
#[tokio::test]
async fn head_on_an_axum_route_is_completed() {
    recorder();
    let app = Router::new()
        .route("/health", get(|| async { "ok" }))
        .layer(ServerBudgetLayer::new(profile("d-head")));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let http = reqwest::Client::new();
    for _ in 0..3 {
        let res = http
            .head(format!("http://{addr}/health"))
            .header("x-request-timeout-ms", "900")
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        assert!(res.bytes().await.unwrap().is_empty());
    }
    assert_eq!(settled("d-head", "/health", 3).await, (3, 0, 0));
}

/// Over HTTP/1.1, hyper drops a body once its `Content-Length` is reached, without polling it
/// for its end: a streamed answer of two chunks and a single-chunk stream are `completed`, as
/// is a `HEAD`, whose body hyper never polls.
#[tokio::test]
async fn bodies_hyper_delivered_in_full_are_completed() {
    recorder();
    let service = ServerBudget::new(
        tower::service_fn(|req: http::Request<hyper::body::Incoming>| async move {
            Ok::<_, Infallible>(answer(&req))
        }),
        profile("d-hyper"),
    );
    let addr = serve_hyper(service).await;
    let http = reqwest::Client::builder().http1_only().build().unwrap();
    for (path, expected) in [("/stream", &b"helloworld"[..]), ("/once", b"whole")] {
        let res = http
            .get(format!("http://{addr}{path}"))
            .header("x-request-timeout-ms", "900")
            .send()
            .await
            .unwrap();
        assert_eq!(res.version(), http::Version::HTTP_11);
        assert_eq!(&res.bytes().await.unwrap()[..], expected, "{path}");
    }
    let res = http
        .head(format!("http://{addr}/stream"))
        .header("x-request-timeout-ms", "900")
        .send()
        .await
        .unwrap();
    assert_eq!(res.headers()["content-length"], "10");
    assert!(res.bytes().await.unwrap().is_empty());

    // `/stream` twice (GET and HEAD); `/once` is no profile route, so it is `other` (C20).
    assert_eq!(settled("d-hyper", "/stream", 2).await, (2, 0, 0));
    assert_eq!(settled("d-hyper", "other", 1).await, (1, 0, 0));
}

/// A body the client walks away from with bytes still to send is `cancelled` (C5): the
/// client reads the first chunk of a declared megabyte and drops the connection.
#[tokio::test]
async fn a_body_dropped_with_bytes_left_is_cancelled() {
    recorder();
    let service = ServerBudget::new(
        tower::service_fn(|req: http::Request<hyper::body::Incoming>| async move {
            Ok::<_, Infallible>(answer(&req))
        }),
        Profile::from_yaml("service: d-gone\nroutes:\n  - path: /endless\n", "t.yaml").unwrap(),
    );
    let addr = serve_hyper(service).await;
    let http = reqwest::Client::builder().http1_only().build().unwrap();
    let mut res = http
        .get(format!("http://{addr}/endless"))
        .header("x-request-timeout-ms", "5000")
        .send()
        .await
        .unwrap();
    assert!(!res.chunk().await.unwrap().unwrap().is_empty());
    // The body's bytes keep coming; the client leaves (reqwest closes an unfinished
    // HTTP/1.1 connection rather than reuse it).
    drop(res);
    drop(http);
    assert_eq!(settled("d-gone", "/endless", 1).await, (0, 1, 0));
}

/// An inner service that fails sends no answer (hyper closes the connection): not
/// `completed`. The guard ends it as an abandoned answer: `cancelled` with budget left.
#[tokio::test]
async fn a_failed_service_is_not_completed() {
    recorder();
    let service = ServerBudget::new(
        tower::service_fn(|_req: http::Request<hyper::body::Incoming>| async move {
            Err::<http::Response<Full<Bytes>>, _>(std::io::Error::other("the service failed"))
        }),
        profile("d-fail"),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = service.clone();
            let service = hyper::service::service_fn(move |req| {
                tower::ServiceExt::oneshot(service.clone(), req)
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    let sent = reqwest::Client::new()
        .get(format!("http://{addr}/fail"))
        .header("x-request-timeout-ms", "900")
        .send()
        .await;
    assert!(
        sent.is_err(),
        "hyper answers a failed service with no response: {sent:?}"
    );
    assert_eq!(settled("d-fail", "/fail", 1).await, (0, 1, 0));
}
