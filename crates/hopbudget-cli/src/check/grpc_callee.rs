//! The downstream played as a gRPC callee (`--grpc`): an HTTP/2 (h2c) server that answers
//! any method, since it never decodes a message. Each call (a stream, not a connection: a
//! gRPC client keeps one connection for all its calls) is recorded when its headers arrive
//! and answered as the case running at that moment asks: an empty message and `grpc-status:
//! 0`, a trailers-only DEADLINE_EXCEEDED or CANCELLED marked with `x-deadline-outcome`, or
//! nothing until the service resets the stream.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use hopbudget::codec::marker;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::call::{Call, HOLD_LIMIT, Mode};

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// What every call shares: how to answer, where to report calls, and their count.
#[derive(Clone, Debug)]
pub(crate) struct Callee {
    pub(crate) mode: Arc<Mutex<Mode>>,
    pub(crate) calls: mpsc::UnboundedSender<Call>,
    pub(crate) total: Arc<AtomicUsize>,
}

/// Serve one HTTP/2 connection until the service closes it.
pub(crate) async fn serve(stream: TcpStream, callee: Callee) {
    let service = hyper::service::service_fn(move |req| {
        let callee = callee.clone();
        async move { Ok::<_, Infallible>(call(req, callee).await) }
    });
    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// Sends when the call ended without an answer: the service reset the stream or closed the
/// connection (hyper drops the call's future then), or the hold ran out.
struct HungUp(Option<oneshot::Sender<Instant>>);

impl Drop for HungUp {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(Instant::now());
        }
    }
}

async fn call(req: http::Request<hyper::body::Incoming>, callee: Callee) -> http::Response<Body> {
    let mode = *callee.mode.lock().unwrap_or_else(|p| p.into_inner());
    callee.total.fetch_add(1, Ordering::SeqCst);
    let headers = req
        .headers()
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let (closed_tx, closed) = oneshot::channel();
    let call = Call {
        at: Instant::now(),
        headers,
        closed,
    };
    let hold = mode == Mode::Hold || (mode == Mode::Measure && matches!(call.told(), Ok(None)));
    let _ = callee.calls.send(call);
    if hold {
        let hung_up = HungUp(Some(closed_tx));
        tokio::time::sleep(HOLD_LIMIT).await;
        drop(hung_up);
        return status(14, "the checker's downstream held the call", None);
    }
    match mode {
        Mode::Expired => status(4, "deadline expired", Some("expired")),
        Mode::Cancelled => status(1, "cancelled", Some("cancelled")),
        Mode::Answer | Mode::Measure | Mode::Hold => ok(),
    }
}

/// An empty message, then `grpc-status: 0` in the trailers.
fn ok() -> http::Response<Body> {
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    let body = Full::new(Bytes::from_static(&[0, 0, 0, 0, 0]))
        .with_trailers(async move { Some(Ok(trailers)) })
        .boxed_unsync();
    let mut response = http::Response::new(body);
    response.headers_mut().insert(
        "content-type",
        http::HeaderValue::from_static("application/grpc"),
    );
    response
}

/// A trailers-only answer: the status in the headers, no body.
fn status(code: u16, message: &'static str, outcome: Option<&'static str>) -> http::Response<Body> {
    let mut response = http::Response::new(Empty::new().boxed_unsync());
    let headers = response.headers_mut();
    headers.insert(
        "content-type",
        http::HeaderValue::from_static("application/grpc"),
    );
    headers.insert("grpc-status", http::HeaderValue::from(code));
    headers.insert("grpc-message", http::HeaderValue::from_static(message));
    if let Some(outcome) = outcome {
        headers.insert(marker::OUTCOME, http::HeaderValue::from_static(outcome));
    }
    response
}
