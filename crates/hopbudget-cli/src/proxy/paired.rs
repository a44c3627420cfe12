//! One HTTP/1.1 connection to the service per caller connection, as nginx's upstream
//! `keepalive` pairs them.
//!
//! An HTTP/1.1 caller sends its requests one after another on its connection, so one
//! connection to the service carries all of them: the proxy keeps it beside the caller's
//! connection ([`Pairing`]) and sends the next request on it without a pool lookup. This is
//! the cheapest path a request can take through hyper (`hyper::client::conn::http1`), a
//! good part of the proxy's CPU per request with hyper-util's pooled client (a hashed pool
//! key, a checkout and a return per request). When the caller's connection ends, its
//! connection to the service, if idle, waits in a short list for the next caller.
//!
//! Cancellation is unchanged: dropping the call's future (the deadline passed, the caller
//! left) makes hyper close that connection, which is what the service's framework watches
//! (C5, C7). The pairing then holds nothing and the caller's next request opens a new one.

use std::sync::{Arc, Mutex};

use http::uri::Authority;
use http::{Request, Response};
use hyper::body::Incoming;

use super::body::FromCaller;
use super::origination::Origination;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tower::BoxError;

/// Idle connections kept for new callers, at most (nginx's `keepalive` takes a number too).
const MAX_IDLE: usize = 64;

type Sender = SendRequest<FromCaller>;

/// The service's address and its idle HTTP/1.1 connections, shared by every caller
/// connection.
#[derive(Debug)]
pub(crate) struct Connections {
    authority: Authority,
    // TLS to the service (see `origination`).
    tls: Option<Origination>,
    idle: Mutex<Vec<Sender>>,
}

impl Connections {
    pub(crate) fn new(authority: Authority, tls: Option<Origination>) -> Arc<Self> {
        Arc::new(Self {
            authority,
            tls,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// A pairing for a new caller connection.
    pub(crate) fn pairing(self: &Arc<Self>) -> Pairing {
        Pairing(Arc::new(Slot {
            sender: Mutex::new(None),
            connections: self.clone(),
        }))
    }

    fn take_idle(&self) -> Option<Sender> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        // A connection the service closed while it waited is skipped here; one it closes
        // just now fails its request unsent, which is then sent on another.
        while let Some(sender) = idle.pop() {
            if !sender.is_closed() {
                return Some(sender);
            }
        }
        None
    }

    fn put_idle(&self, sender: Sender) {
        // Its last answer may not be marked done yet (the connection's task has not run
        // since): the next user waits for that in `ready()`. One whose answer was abandoned
        // mid-body is closing, and `ready()` then fails and another is taken.
        if !sender.is_closed() {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            if idle.len() < MAX_IDLE {
                idle.push(sender);
            }
        }
    }

    async fn connect(&self) -> Result<Sender, BoxError> {
        let stream = tokio::net::TcpStream::connect(self.authority.as_str()).await?;
        // Loopback sidecar traffic: small writes must not wait for Nagle.
        stream.set_nodelay(true)?;
        match &self.tls {
            None => handshake(stream).await,
            Some(tls) => handshake(tls.connect(stream).await?).await,
        }
    }
}

/// An HTTP/1.1 connection over `io`, its task spawned.
async fn handshake<IO>(io: IO) -> Result<Sender, BoxError>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (sender, connection) = http1::Builder::new()
        .handshake::<_, FromCaller>(TokioIo::new(io))
        .await?;
    tokio::spawn(async move {
        // Ends when the service closes it, on a cancelled request, or once every sender
        // is dropped and it is idle.
        if let Err(error) = connection.await {
            tracing::debug!(%error, "connection to the service ended with an error");
        }
    });
    Ok(sender)
}

/// The connection to the service that belongs to one caller connection. Cloned into each of
/// its requests; when the last clone goes (the caller's connection ended), the connection
/// goes back to the idle list.
#[derive(Debug, Clone)]
pub(crate) struct Pairing(Arc<Slot>);

#[derive(Debug)]
struct Slot {
    sender: Mutex<Option<Sender>>,
    connections: Arc<Connections>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let sender = self
            .sender
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(sender) = sender {
            self.connections.put_idle(sender);
        }
    }
}

impl Pairing {
    /// Send `req` (origin-form URI, `Host` set) on this caller's connection to the service,
    /// opening one when there is none.
    pub(crate) async fn send(
        self,
        mut req: Request<FromCaller>,
    ) -> Result<Response<Incoming>, BoxError> {
        loop {
            let held = self.take();
            let reused = held.is_some();
            let mut sender = match held {
                Some(sender) => sender,
                None => self.0.connections.connect().await?,
            };
            // Waits for the previous answer's end on this connection (already there for an
            // HTTP/1.1 caller, whose next request follows it); fails when the service closed
            // the connection, then another is taken.
            if let Err(error) = sender.ready().await {
                if reused {
                    continue;
                }
                return Err(error.into());
            }
            match sender.try_send_request(req).await {
                Ok(res) => {
                    // Kept for the caller's next request: it can only come once this answer
                    // has been passed on whole.
                    self.put(sender);
                    return Ok(res);
                }
                Err(mut error) => match error.take_message() {
                    // Not sent: a reused connection closed under it. Another try, as
                    // hyper-util's pool retries such a request.
                    Some(unsent) if reused => req = unsent,
                    _ => return Err(error.into_error().into()),
                },
            }
        }
    }

    fn take(&self) -> Option<Sender> {
        let held = self
            .0
            .sender
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        held.or_else(|| self.0.connections.take_idle())
    }

    fn put(&self, sender: Sender) {
        let mut slot = self.0.sender.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(sender);
        }
    }
}
