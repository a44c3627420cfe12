//! `hopbudget audit --listen ADDR`: read the spans where they already go. An OTLP/HTTP
//! receiver for traces, as the OpenTelemetry specification's OTLP/HTTP section describes it:
//! `POST /v1/traces` with `Content-Type: application/x-protobuf` (an `ExportTraceServiceRequest`)
//! or `application/json` (OTLP JSON), optionally `Content-Encoding: gzip`, which is what an
//! SDK's `otlphttp` exporter or a Collector's `otlphttp` exporter sends.
//!
//! Answers: 200 with an `ExportTraceServiceResponse` in the request's encoding (with
//! `partial_success` naming how many spans were rejected and why, when some were); 400 with a
//! `google.rpc.Status` naming the problem when the body cannot be read at all (not protobuf or
//! JSON, bad gzip); 413 past `--max-line-bytes` (compressed or not); 415 for another
//! `Content-Type` or `Content-Encoding`; 405 for another method, 404 for another path.
//!
//! Spans go to the same audit as a file's ([`crate::audit::run`], handed over through
//! `feed::Feed`): grouped by trace id as they arrive, a trace audited once its root came and enough later spans passed, memory bounded
//! by `--max-open-spans`. One thread owns the audit and takes the decoded requests in order
//! (the connections only read and answer). At most [`BODIES_HELD`] request bodies are held at
//! once, read or queued (so at most that many times `--max-line-bytes`); further requests wait
//! before their body is read, which the exporters' timeouts, retries and backoff absorb,
//! instead of growing memory. A report is made on
//! SIGINT or SIGTERM (the final one: every open trace audited) and, with `--interval`,
//! every that many seconds (the traces finished so far).

use std::convert::Infallible;
use std::io::Read;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{CONTENT_ENCODING, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceResponse,
};
use prost::Message;
use tokio::sync::{mpsc, oneshot};

use super::Encoding;
use super::feed::Feed;
use crate::audit::options::AuditOptions;

/// Request bodies held at once, being read, queued for the audit or being audited.
pub const BODIES_HELD: usize = 8;

/// Where to listen and how often to report.
#[derive(Clone, Debug)]
pub struct ListenOptions {
    /// The address to bind (port 0 picks one; the bound address is passed to `ready`).
    pub addr: SocketAddr,
    /// Report every this often, besides when stopped.
    pub interval: Option<Duration>,
}

/// Why the receiver stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// SIGINT (Ctrl-C).
    Interrupt,
    /// SIGTERM.
    Terminate,
}

/// What the audit thread is asked.
enum Ask<R> {
    Export {
        body: Bytes,
        encoding: Encoding,
        reply: oneshot::Sender<Result<(u64, Option<String>), String>>,
    },
    Report(oneshot::Sender<R>),
    Finish(oneshot::Sender<R>),
}

/// The audit's own thread: requests in arrival order, reports when asked.
fn audit_thread<F: Feed>(
    opts: AuditOptions,
    mut asks: mpsc::Receiver<Ask<F::Report>>,
) -> Option<F::Report> {
    let mut session = F::open(&opts);
    let mut number = 0u64;
    while let Some(ask) = asks.blocking_recv() {
        match ask {
            Ask::Export {
                body,
                encoding,
                reply,
            } => {
                number += 1;
                let _ = reply.send(session.record(&body, encoding, "POST /v1/traces", number));
            }
            Ask::Report(reply) => {
                let _ = reply.send(session.snapshot());
            }
            Ask::Finish(reply) => {
                let _ = reply.send(session.finish());
                return None;
            }
        }
    }
    Some(session.finish())
}

/// Listen until SIGINT or SIGTERM: `ready` is called with the bound address once listening,
/// `periodic` with each `--interval` report; returns the final report and what stopped it.
///
/// # Errors
/// The address cannot be bound, or the signal handlers cannot be installed.
pub(crate) fn serve<F: Feed>(
    opts: &AuditOptions,
    listen: &ListenOptions,
    ready: impl FnOnce(SocketAddr),
    mut periodic: impl FnMut(&F::Report),
) -> std::io::Result<(F::Report, Stopped)> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (tx, rx) = mpsc::channel::<Ask<F::Report>>(BODIES_HELD);
    let bodies = std::sync::Arc::new(tokio::sync::Semaphore::new(BODIES_HELD));
    let auditing = {
        let opts = opts.clone();
        std::thread::Builder::new()
            .name("audit".into())
            .spawn(move || audit_thread::<F>(opts, rx))?
    };
    let max_body = opts.max_line_bytes;
    let result = runtime.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        let listener = tokio::net::TcpListener::bind(listen.addr).await?;
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        ready(listener.local_addr()?);
        let mut tick = listen.interval.map(|every| {
            let mut t = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            t
        });
        let stopped = loop {
            tokio::select! {
                accepted = listener.accept() => {
                    // A failed accept (out of descriptors) is the connection's, not the
                    // receiver's: go on listening.
                    if let Ok((stream, _)) = accepted {
                        tokio::spawn(connection(stream, tx.clone(), bodies.clone(), max_body));
                    }
                }
                () = async { tick.as_mut().unwrap().tick().await; }, if tick.is_some() => {
                    let (reply, report) = oneshot::channel();
                    if tx.send(Ask::Report(reply)).await.is_ok()
                        && let Ok(r) = report.await
                    {
                        periodic(&r);
                    }
                }
                _ = term.recv() => break Stopped::Terminate,
                _ = int.recv() => break Stopped::Interrupt,
            }
        };
        drop(listener);
        let (reply, report) = oneshot::channel();
        let _ = tx.send(Ask::Finish(reply)).await;
        Ok::<_, std::io::Error>((report.await.ok(), stopped))
    });
    // Open keep-alive connections are not waited for: the report is made.
    runtime.shutdown_background();
    let (report, stopped) = result?;
    let last = auditing.join().ok().flatten();
    let report = report
        .or(last)
        .ok_or_else(|| std::io::Error::other("the audit thread stopped without a report"))?;
    Ok((report, stopped))
}

async fn connection<R: Send + 'static>(
    stream: tokio::net::TcpStream,
    asks: mpsc::Sender<Ask<R>>,
    bodies: std::sync::Arc<tokio::sync::Semaphore>,
    max_body: usize,
) {
    let service = hyper::service::service_fn(move |req| {
        let (asks, bodies) = (asks.clone(), bodies.clone());
        async move {
            // Held from before the body is read until it has been audited.
            let Ok(_held) = bodies.acquire().await else {
                return Ok(plain(StatusCode::SERVICE_UNAVAILABLE, "stopping".into()));
            };
            Ok::<_, Infallible>(handle(req, &asks, max_body).await)
        }
    });
    // A peer that goes away mid-request is its own problem, not the audit's.
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
        .await;
}

type Answer = Response<Full<Bytes>>;

fn plain(status: StatusCode, text: String) -> Answer {
    let mut r = Response::new(Full::new(Bytes::from(text + "\n")));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    r
}

fn content_type(encoding: Encoding) -> HeaderValue {
    HeaderValue::from_static(match encoding {
        Encoding::Json => "application/json",
        Encoding::Protobuf => "application/x-protobuf",
    })
}

/// `google.rpc.Status`, the body of an OTLP/HTTP error answer.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

/// gRPC's INVALID_ARGUMENT, the code of a request that cannot be read.
const INVALID_ARGUMENT: i32 = 3;

fn failure(status: StatusCode, encoding: Encoding, message: String) -> Answer {
    let body = match encoding {
        Encoding::Protobuf => RpcStatus {
            code: INVALID_ARGUMENT,
            message,
        }
        .encode_to_vec(),
        Encoding::Json => serde_json::json!({"code": INVALID_ARGUMENT, "message": message})
            .to_string()
            .into_bytes(),
    };
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, content_type(encoding));
    r
}

fn success(encoding: Encoding, rejected: u64, why: Option<String>) -> Answer {
    let partial = (rejected > 0).then(|| ExportTracePartialSuccess {
        rejected_spans: i64::try_from(rejected).unwrap_or(i64::MAX),
        error_message: why.unwrap_or_default(),
    });
    let body = match encoding {
        Encoding::Protobuf => ExportTraceServiceResponse {
            partial_success: partial,
        }
        .encode_to_vec(),
        // The protobuf JSON mapping: int64 as a string, an unset message left out.
        Encoding::Json => match partial {
            Some(p) => serde_json::json!({"partialSuccess": {
                "rejectedSpans": p.rejected_spans.to_string(),
                "errorMessage": p.error_message,
            }}),
            None => serde_json::json!({}),
        }
        .to_string()
        .into_bytes(),
    };
    let mut r = Response::new(Full::new(Bytes::from(body)));
    r.headers_mut().insert(CONTENT_TYPE, content_type(encoding));
    r
}

/// The body's encoding from `Content-Type` (its media type, parameters ignored).
fn encoding_of(req: &Request<Incoming>) -> Result<Encoding, String> {
    let Some(value) = req.headers().get(CONTENT_TYPE) else {
        return Err("no Content-Type".into());
    };
    let media = value
        .to_str()
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match media.as_str() {
        "application/x-protobuf" => Ok(Encoding::Protobuf),
        "application/json" => Ok(Encoding::Json),
        other => Err(format!("Content-Type {other:?}")),
    }
}

async fn handle<R>(req: Request<Incoming>, asks: &mpsc::Sender<Ask<R>>, max_body: usize) -> Answer {
    if req.uri().path() != "/v1/traces" {
        return plain(
            StatusCode::NOT_FOUND,
            format!(
                "{} is not served here: OTLP/HTTP traces go to POST /v1/traces",
                req.uri().path()
            ),
        );
    }
    if req.method() != Method::POST {
        let mut r = plain(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{} /v1/traces: only POST is served", req.method()),
        );
        r.headers_mut()
            .insert(hyper::header::ALLOW, HeaderValue::from_static("POST"));
        return r;
    }
    let encoding = match encoding_of(&req) {
        Ok(e) => e,
        Err(what) => {
            return plain(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!(
                    "{what} is not read: send application/x-protobuf or application/json \
                     (OTLP/HTTP)"
                ),
            );
        }
    };
    let gzip = match req.headers().get(CONTENT_ENCODING).map(HeaderValue::to_str) {
        None => false,
        Some(Ok(e)) if e.eq_ignore_ascii_case("identity") => false,
        Some(Ok(e)) if e.eq_ignore_ascii_case("gzip") => true,
        Some(e) => {
            return plain(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!(
                    "Content-Encoding {:?} is not read: send gzip or none",
                    e.unwrap_or("")
                ),
            );
        }
    };
    let too_large = || {
        failure(
            StatusCode::PAYLOAD_TOO_LARGE,
            encoding,
            format!("body larger than {max_body} bytes (--max-line-bytes)"),
        )
    };
    let body = match Limited::new(req.into_body(), max_body).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => return too_large(),
        Err(e) => {
            return failure(
                StatusCode::BAD_REQUEST,
                encoding,
                format!("cannot read the body: {e}"),
            );
        }
    };
    let body = if gzip {
        let mut out = Vec::new();
        let read = flate2::read::MultiGzDecoder::new(&body[..])
            .take(max_body as u64 + 1)
            .read_to_end(&mut out);
        match read {
            Ok(n) if n > max_body => return too_large(),
            Ok(_) => Bytes::from(out),
            Err(e) => {
                return failure(
                    StatusCode::BAD_REQUEST,
                    encoding,
                    format!("Content-Encoding gzip, but the body is not gzip: {e}"),
                );
            }
        }
    } else {
        body
    };
    let (reply, answer) = oneshot::channel();
    let ask = Ask::Export {
        body,
        encoding,
        reply,
    };
    if asks.send(ask).await.is_err() {
        return plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "the audit is finishing its report".into(),
        );
    }
    match answer.await {
        Ok(Ok((rejected, why))) => success(encoding, rejected, why),
        Ok(Err(problem)) => failure(StatusCode::BAD_REQUEST, encoding, problem),
        Err(_) => plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "the audit is finishing its report".into(),
        ),
    }
}
