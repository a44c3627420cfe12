//! The caller's side: one request to the service under test on a connection of its own, its
//! answer read with bounded patience, and nothing hidden (a connection refused, a reply that
//! is not HTTP and no reply at all are each told apart). HTTP/1.1 here; a gRPC call (with
//! `--grpc`) is [`super::grpc_caller`]'s.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

pub use super::answer::{Answer, CallError, GrpcStatus, grpc_code_name};
use super::downstream::parse_headers;
use super::grpc_caller;

/// Where the service under test listens, and the path the checker requests.
#[derive(Clone, Debug)]
pub struct Target {
    /// The service's address.
    pub addr: SocketAddr,
    /// The `host` header.
    pub host: String,
    /// The request path: `/SERVICE/METHOD` for a gRPC call.
    pub path: String,
    /// Whether the service is called with gRPC.
    pub grpc: bool,
}

/// A request sent on its own connection, not yet answered.
#[derive(Debug)]
pub enum Pending {
    /// An HTTP/1.1 request.
    Http(HttpPending),
    /// A gRPC call.
    Grpc(grpc_caller::Pending),
}

/// What a caller that left keeps: a gRPC call's connection, open after its stream was reset.
#[derive(Debug)]
pub struct Left {
    _connection: Option<grpc_caller::Connection>,
}

impl Pending {
    /// When the request had been sent.
    pub fn sent(&self) -> Instant {
        match self {
            Pending::Http(p) => p.sent,
            Pending::Grpc(p) => p.sent(),
        }
    }

    /// Read the answer, waiting at most `patience` for it.
    pub async fn answer(self, patience: Duration) -> Result<Answer, CallError> {
        match self {
            Pending::Http(p) => p.answer(patience).await,
            Pending::Grpc(p) => p.answer(patience).await,
        }
    }

    /// Leave mid-call: an HTTP/1.1 caller closes its connection, a gRPC caller resets its
    /// stream (its connection stays open until what is returned is dropped).
    pub fn leave(self) -> Left {
        match self {
            Pending::Http(_) => Left { _connection: None },
            Pending::Grpc(p) => Left {
                _connection: Some(p.leave()),
            },
        }
    }
}

/// An HTTP/1.1 request written on its own connection, not yet answered.
#[derive(Debug)]
pub struct HttpPending {
    stream: TcpStream,
    sent: Instant,
}

impl HttpPending {
    /// Read the answer, waiting at most `patience` for its head.
    async fn answer(mut self, patience: Duration) -> Result<Answer, CallError> {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let until = self.sent + patience;
        let (end, elapsed) = loop {
            let read = tokio::time::timeout_at(until, self.stream.read(&mut chunk)).await;
            let n = match read {
                Err(_) => return Err(CallError::NoAnswer(patience)),
                Ok(Err(e)) if buf.is_empty() => {
                    return Err(CallError::Unreachable(format!("connection failed: {e}")));
                }
                Ok(Err(_)) | Ok(Ok(0)) => {
                    if buf.is_empty() {
                        return Err(CallError::NotHttp("the connection closed".into()));
                    }
                    return Err(CallError::NotHttp(String::from_utf8_lossy(&buf).into()));
                }
                Ok(Ok(n)) => n,
            };
            buf.extend_from_slice(&chunk[..n]);
            if buf.len() >= 5 && !buf.starts_with(b"HTTP/") {
                let start = String::from_utf8_lossy(&buf[..buf.len().min(40)]).into_owned();
                return Err(CallError::NotHttp(start));
            }
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break (end, self.sent.elapsed());
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| CallError::NotHttp(head.clone()))?;
        // The body: what follows, until the connection closes (asked with `connection:
        // close`), bounded so a streaming answer cannot hold the checker.
        let mut body = buf[end + 4..].to_vec();
        let _ = tokio::time::timeout(Duration::from_millis(500), async {
            while let Ok(n) = self.stream.read(&mut chunk).await {
                if n == 0 || body.len() > 64 * 1024 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        })
        .await;
        Ok(Answer {
            status,
            headers: parse_headers(&head),
            body: String::from_utf8_lossy(&body).into_owned(),
            elapsed,
            grpc: None,
        })
    }
}

/// Connect and send the request (`GET path`, or a gRPC call) with `headers` on a fresh
/// connection.
pub async fn send(target: &Target, headers: &[(&str, String)]) -> Result<Pending, CallError> {
    if target.grpc {
        return grpc_caller::send(target.addr, &target.host, &target.path, headers)
            .await
            .map(Pending::Grpc);
    }
    let mut stream = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(target.addr))
        .await
        .map_err(|_| CallError::Unreachable(format!("connecting to {} timed out", target.addr)))?
        .map_err(|e| CallError::Unreachable(format!("{}: {e}", target.addr)))?;
    let _ = stream.set_nodelay(true);
    let mut head = format!(
        "GET {} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n",
        target.path, target.host
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream
        .write_all(head.as_bytes())
        .await
        .map_err(|e| CallError::Unreachable(format!("{}: {e}", target.addr)))?;
    Ok(Pending::Http(HttpPending {
        stream,
        sent: Instant::now(),
    }))
}
