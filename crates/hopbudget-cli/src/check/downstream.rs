//! The downstream the service under test calls: a listener on the address it was configured
//! with, recording each call (when it came, what deadline it carried, when the service hung
//! up) and answering as the running case asks. HTTP/1.1 here; with `--grpc` each connection
//! is served by the gRPC callee (`grpc_callee`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use super::call::{Call, HOLD_LIMIT, Mode};
use super::grpc_callee;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// The longest a request head may take to arrive, and its largest size.
const HEAD_PATIENCE: Duration = Duration::from_secs(5);
const HEAD_LIMIT: usize = 64 * 1024;

/// The listening downstream; the calls it receives arrive on [`Downstream::next_call`].
#[derive(Debug)]
pub struct Downstream {
    addr: SocketAddr,
    mode: Arc<Mutex<Mode>>,
    calls: mpsc::UnboundedReceiver<Call>,
    /// Every call received in the run, matched to a case or not.
    pub total: Arc<std::sync::atomic::AtomicUsize>,
}

impl Downstream {
    /// Listen on `addr`, as a gRPC callee when `grpc`; an address in use is an error naming
    /// it.
    pub async fn bind(addr: SocketAddr, grpc: bool) -> Result<Self, String> {
        Self::bind_as(addr, "downstream", Mode::Answer, grpc).await
    }

    /// Listen on `addr` as the `role` the error names, answering as `mode` to begin with.
    pub async fn bind_as(
        addr: SocketAddr,
        role: &str,
        mode: Mode,
        grpc: bool,
    ) -> Result<Self, String> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot listen on the {role} address {addr}: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let mode = Arc::new(Mutex::new(mode));
        let total = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (tx, calls) = mpsc::unbounded_channel();
        let (m, t) = (mode.clone(), total.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                if grpc {
                    // Counted per call: one connection carries many.
                    let callee = grpc_callee::Callee {
                        mode: m.clone(),
                        calls: tx.clone(),
                        total: t.clone(),
                    };
                    tokio::spawn(grpc_callee::serve(stream, callee));
                    continue;
                }
                let mode = *m.lock().unwrap_or_else(|p| p.into_inner());
                t.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(serve(stream, mode, tx.clone()));
            }
        });
        Ok(Self {
            addr,
            mode,
            calls,
            total,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How the next calls are answered; calls left over from an earlier case are dropped.
    pub fn set_mode(&mut self, mode: Mode) {
        *self.mode.lock().unwrap_or_else(|p| p.into_inner()) = mode;
        while self.calls.try_recv().is_ok() {}
    }

    /// The next call of the case whose trace id is `trace` (or a call forwarding no trace
    /// context, which can only be attributed by time), waiting at most `patience`.
    pub async fn next_call(&mut self, trace: &str, patience: Duration) -> Option<Call> {
        let until = Instant::now() + patience;
        loop {
            let call = tokio::time::timeout_at(until, self.calls.recv())
                .await
                .ok()??;
            if call.trace_id().is_none_or(|t| t == trace) {
                return Some(call);
            }
        }
    }
}

/// One connection: read the request head, report the call, then answer or hold.
async fn serve(mut stream: TcpStream, mode: Mode, calls: mpsc::UnboundedSender<Call>) {
    let Ok(Some(headers)) = tokio::time::timeout(HEAD_PATIENCE, read_head(&mut stream)).await
    else {
        return;
    };
    let at = Instant::now();
    let (closed_tx, closed) = oneshot::channel();
    let call = Call {
        at,
        headers,
        closed,
    };
    let hold = mode == Mode::Hold || (mode == Mode::Measure && matches!(call.told(), Ok(None)));
    let _ = calls.send(call);
    if hold {
        // Wait for the service to hang up: a read of zero bytes, or an error (a reset).
        let mut sink = [0u8; 1024];
        let _ = tokio::time::timeout(HOLD_LIMIT, async {
            loop {
                match stream.read(&mut sink).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        })
        .await;
        let _ = closed_tx.send(Instant::now());
        return;
    }
    let answer: &[u8] = match mode {
        Mode::Expired => {
            b"HTTP/1.1 504 Gateway Timeout\r\nx-deadline-outcome: expired\r\ncontent-length: 8\r\nconnection: close\r\n\r\nexpired\n"
        }
        Mode::Cancelled => {
            b"HTTP/1.1 499 Client Closed Request\r\nx-deadline-outcome: cancelled\r\ncontent-length: 10\r\nconnection: close\r\n\r\ncancelled\n"
        }
        Mode::Answer | Mode::Measure | Mode::Hold => {
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"
        }
    };
    let _ = stream.write_all(answer).await;
    let _ = stream.shutdown().await;
}

/// Read up to the end of the request head; its headers, names lower-cased. `None` when the
/// connection closed first or the head is too large.
async fn read_head(stream: &mut TcpStream) -> Option<Vec<(String, String)>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]);
            return Some(parse_headers(&head));
        }
        if buf.len() > HEAD_LIMIT {
            return None;
        }
    }
}

/// The `name: value` lines after the first line of a head.
pub(crate) fn parse_headers(head: &str) -> Vec<(String, String)> {
    head.split("\r\n")
        .skip(1)
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect()
}
