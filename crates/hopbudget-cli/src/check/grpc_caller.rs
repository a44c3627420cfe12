//! The caller's side over gRPC (`--grpc SERVICE/METHOD`): one unary call, an empty message,
//! on an HTTP/2 connection of its own (h2c, as a gRPC client without TLS dials), its status
//! read from the headers (a trailers-only answer) or the trailers, with bounded patience.
//!
//! The call runs in a task of its own, so that the caller can leave mid-call the way a gRPC
//! client does: the stream is reset (RST_STREAM) while the connection stays open (C5).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::answer::{Answer, CallError, GrpcStatus};

/// An empty message, length-prefixed and uncompressed: every method's request here.
const EMPTY_MESSAGE: [u8; 5] = [0, 0, 0, 0, 0];
/// How long a connection and its HTTP/2 handshake may take.
const CONNECT_PATIENCE: Duration = Duration::from_secs(5);

/// A call made, not yet answered.
#[derive(Debug)]
pub struct Pending {
    sent: Instant,
    call: JoinHandle<Result<Answer, CallError>>,
    connection: Connection,
}

/// The connection a call is on: closed when dropped.
#[derive(Debug)]
pub struct Connection {
    // Held so that the connection outlives a reset stream.
    _sender: SendRequest<Full<Bytes>>,
    task: JoinHandle<()>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Pending {
    /// When the call had been sent.
    pub fn sent(&self) -> Instant {
        self.sent
    }

    /// Wait at most `patience` (from the call) for its status.
    pub async fn answer(self, patience: Duration) -> Result<Answer, CallError> {
        let Pending {
            sent,
            mut call,
            connection,
        } = self;
        let answer = match tokio::time::timeout_at(sent + patience, &mut call).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => Err(CallError::Unreachable(format!("the call failed: {e}"))),
            Err(_) => {
                call.abort();
                Err(CallError::NoAnswer(patience))
            }
        };
        drop(connection);
        answer
    }

    /// Leave mid-call: reset the stream, keep the connection until what is returned is
    /// dropped.
    pub fn leave(self) -> Connection {
        // Dropping the response future resets the stream (RST_STREAM, CANCEL).
        self.call.abort();
        self.connection
    }
}

/// Connect to `addr` and call `path` (`/SERVICE/METHOD`) with `headers`.
pub async fn send(
    addr: SocketAddr,
    host: &str,
    path: &str,
    headers: &[(&str, String)],
) -> Result<Pending, CallError> {
    let stream = tokio::time::timeout(CONNECT_PATIENCE, TcpStream::connect(addr))
        .await
        .map_err(|_| CallError::Unreachable(format!("connecting to {addr} timed out")))?
        .map_err(|e| CallError::Unreachable(format!("{addr}: {e}")))?;
    let _ = stream.set_nodelay(true);
    let (mut sender, connection) = tokio::time::timeout(
        CONNECT_PATIENCE,
        hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .handshake::<_, Full<Bytes>>(TokioIo::new(stream)),
    )
    .await
    .map_err(|_| CallError::NotHttp("no HTTP/2 handshake".into()))?
    .map_err(|e| CallError::NotHttp(format!("not HTTP/2: {e}")))?;
    let task = tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut request = http::Request::post(format!("http://{host}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (name, value) in headers {
        request = request.header(*name, value.as_str());
    }
    let request = request
        .body(Full::new(Bytes::from_static(&EMPTY_MESSAGE)))
        .map_err(|e| CallError::Unreachable(format!("cannot build the call: {e}")))?;
    let sent = Instant::now();
    let response = sender.send_request(request);
    let call = tokio::spawn(async move {
        let response = response.await.map_err(|e| failed(&e))?;
        read(response, sent).await
    });
    Ok(Pending {
        sent,
        call,
        connection: Connection {
            _sender: sender,
            task,
        },
    })
}

/// The status of a gRPC answer: from its headers when it is trailers-only, else from its
/// trailers once the body has ended.
async fn read(
    response: http::Response<hyper::body::Incoming>,
    sent: Instant,
) -> Result<Answer, CallError> {
    let (parts, body) = response.into_parts();
    let mut headers = lower(&parts.headers);
    let grpc_content = parts
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    let elapsed = if parts.headers.contains_key("grpc-status") {
        sent.elapsed()
    } else {
        let collected = body
            .collect()
            .await
            .map_err(|e| CallError::NotHttp(format!("the answer broke off: {e}")))?;
        if let Some(trailers) = collected.trailers() {
            headers.extend(lower(trailers));
        }
        sent.elapsed()
    };
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let Some(code) = find("grpc-status") else {
        let kind = if grpc_content {
            "a gRPC answer with no grpc-status"
        } else {
            "HTTP/2 but not gRPC"
        };
        return Err(CallError::NotHttp(format!("{kind}: HTTP {}", parts.status)));
    };
    let code = code
        .parse()
        .map_err(|_| CallError::NotHttp(format!("grpc-status {code:?} is not a number")))?;
    let message = find("grpc-message")
        .map(|m| percent_decode(&m))
        .unwrap_or_default();
    Ok(Answer {
        status: parts.status.as_u16(),
        headers,
        body: message.clone(),
        elapsed,
        grpc: Some(GrpcStatus { code, message }),
    })
}

/// Why a call got no answer: a stream the service reset (grpc-go does so for a `grpc-timeout`
/// it cannot read) is an answer to judge; anything else means the peer speaks no HTTP/2.
fn failed(e: &hyper::Error) -> CallError {
    let h2 = std::error::Error::source(e).and_then(|s| s.downcast_ref::<h2::Error>());
    match h2 {
        Some(h2) if h2.is_reset() && h2.is_remote() => {
            let reason = h2
                .reason()
                .map_or_else(|| "no reason".to_owned(), |r| format!("{r:?}"));
            CallError::Reset(reason)
        }
        _ => CallError::NotHttp(format!("not an HTTP/2 answer: {e}")),
    }
}

fn lower(map: &http::HeaderMap) -> Vec<(String, String)> {
    map.iter()
        .map(|(n, v)| {
            (
                n.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// `grpc-message` is percent-encoded (the gRPC over HTTP/2 spec); bad escapes are kept as
/// they are.
fn percent_decode(message: &str) -> String {
    let bytes = message.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::percent_decode;

    #[test]
    fn grpc_message_is_percent_decoded_and_bad_escapes_are_kept() {
        assert_eq!(
            percent_decode("malformed %60grpc-timeout%60"),
            "malformed `grpc-timeout`"
        );
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }
}
