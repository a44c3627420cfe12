//! Accepting callers, and stopping cleanly: on the stop signal the listener closes, idle
//! connections close, and every request in flight runs to its end, which its budget bounds
//! (at most the profile's `max_ms`), before the proxy exits.

use std::future::Future;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use std::convert::Infallible;

use http::{Request, Response};

use super::body::{FromCaller, ProxyBody};
use super::client_waits::{CLOSED_TOTAL, ClientLimits, InFlight, Tracked, Watched};
use super::stream_deadline::StreamExecutor;
use tokio_rustls::TlsAcceptor;

/// A service that keeps something per caller connection: the ingress, its connection to the
/// service (see `paired`).
pub(crate) trait PerConnection {
    /// The service for a newly accepted connection.
    fn for_connection(&self) -> Self;
}

/// How many caller connections may be open, on all listeners together.
pub(crate) type Slots = Arc<Semaphore>;

/// Open caller connections, and how often the limit stopped accepting.
pub(crate) const CONNECTIONS_OPEN: &str = "hopbudget_proxy_connections_open";
pub(crate) const CONNECTION_LIMIT_REACHED_TOTAL: &str =
    "hopbudget_proxy_connection_limit_reached_total";

/// Serve `service` on `listener` until `stop` resolves, then drain for at most `drain`;
/// each connection's waits on its caller bounded by `waits`, and one of `slots` held while it
/// is open. Returns whether every connection ended within the drain.
pub(crate) async fn serve<S>(
    listener: TcpListener,
    service: S,
    waits: ClientLimits,
    slots: Slots,
    tls: Option<TlsAcceptor>,
    stop: impl Future<Output = ()>,
    drain: Duration,
) -> bool
where
    S: tower::Service<Request<FromCaller>, Response = Response<ProxyBody>, Error = Infallible>
        + PerConnection
        + Clone
        + Send
        + 'static,
    S::Future: Send + Unpin + 'static,
{
    let mut refused = AcceptErrors::default();
    // HTTP/1.1 and HTTP/2 on one port: with prior knowledge (h2c) in plain text, so gRPC
    // callers need no TLS, or by ALPN over TLS. Each HTTP/2 stream's task ends at its
    // answer's deadline (`stream_deadline`).
    let mut builder = auto::Builder::new(StreamExecutor);
    builder.http2().max_concurrent_streams(waits.max_streams);
    let graceful = GracefulShutdown::new();
    tokio::pin!(stop);
    loop {
        // At the limit, stop accepting until a connection ends: callers wait in the backlog,
        // and those connected are served.
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                metrics::counter!(CONNECTION_LIMIT_REACHED_TOTAL).increment(1);
                tracing::warn!("connection limit reached; accepting again when a connection ends");
                tokio::select! {
                    slot = slots.clone().acquire_owned() => match slot {
                        Ok(slot) => slot,
                        Err(_) => break,
                    },
                    () = &mut stop => break,
                }
            }
        };
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => {
                        refused.accepted();
                        stream
                    }
                    // Out of file descriptors and the like: keep serving who is connected,
                    // and wait before the next accept instead of spinning on it.
                    Err(error) => {
                        let pause = refused.failed(&error);
                        tokio::time::sleep(pause).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let in_flight = std::sync::Arc::new(InFlight::default());
                let service = Tracked::new(service.for_connection(), in_flight.clone(), waits.body_read);
                let service = TowerToHyperService::new(service);
                metrics::gauge!(CONNECTIONS_OPEN).increment(1.0);
                if let Some(acceptor) = &tls {
                    // The handshake runs in the connection's own task, bounded as a request
                    // head is: a caller that stalls in it holds nothing else.
                    let acceptor = acceptor.clone();
                    let (builder, watcher) = (builder.clone(), graceful.watcher());
                    tokio::spawn(async move {
                        let _slot = slot;
                        match tokio::time::timeout(waits.header_read, acceptor.accept(stream)).await
                        {
                            Ok(Ok(tls)) => {
                                let stream = Watched::new(tls, waits, in_flight);
                                let connection = builder
                                    .serve_connection_with_upgrades(TokioIo::new(stream), service)
                                    .into_owned();
                                if let Err(error) = watcher.watch(connection).await {
                                    tracing::debug!(%error, "connection ended with an error");
                                }
                            }
                            Ok(Err(error)) => {
                                tracing::debug!(%error, "TLS handshake failed");
                                metrics::counter!(CLOSED_TOTAL, "reason" => "tls_handshake")
                                    .increment(1);
                            }
                            Err(_) => {
                                metrics::counter!(CLOSED_TOTAL, "reason" => "header_read_timeout")
                                    .increment(1);
                            }
                        }
                        metrics::gauge!(CONNECTIONS_OPEN).decrement(1.0);
                    });
                    continue;
                }
                let stream = Watched::new(stream, waits, in_flight);
                // With upgrades: a WebSocket handshake hands its connection over (see `tunnel`).
                let connection = builder
                    .serve_connection_with_upgrades(TokioIo::new(stream), service)
                    .into_owned();
                let connection = graceful.watch(connection);
                tokio::spawn(async move {
                    let _slot = slot;
                    // A caller that leaves mid-request ends here too; its hop is recorded
                    // `cancelled` by the layer, not here.
                    if let Err(error) = connection.await {
                        tracing::debug!(%error, "connection ended with an error");
                    }
                    metrics::gauge!(CONNECTIONS_OPEN).decrement(1.0);
                });
            }
            () = &mut stop => break,
        }
    }
    drop(listener);
    tracing::info!(
        drain_ms = drain.as_millis() as u64,
        "stopping: no new connections; draining requests in flight"
    );
    tokio::select! {
        () = graceful.shutdown() => true,
        () = tokio::time::sleep(drain) => false,
    }
}

/// Failed accepts (out of file descriptors: `EMFILE`, `ENFILE`): a pause that doubles up to
/// a second while they go on, and one log line a second with how many failed, never a spin
/// or a line per failure.
#[derive(Debug, Default)]
struct AcceptErrors {
    pause: Duration,
    unlogged: u64,
    logged_at: Option<tokio::time::Instant>,
}

impl AcceptErrors {
    const FIRST_PAUSE: Duration = Duration::from_millis(5);
    const MAX_PAUSE: Duration = Duration::from_secs(1);

    fn accepted(&mut self) {
        self.pause = Duration::ZERO;
    }

    /// Note a failed accept; how long to wait before the next.
    fn failed(&mut self, error: &std::io::Error) -> Duration {
        self.pause = (self.pause * 2).clamp(Self::FIRST_PAUSE, Self::MAX_PAUSE);
        self.unlogged += 1;
        let now = tokio::time::Instant::now();
        if self
            .logged_at
            .is_none_or(|at| now.duration_since(at) >= Self::MAX_PAUSE)
        {
            tracing::warn!(
                %error,
                failed = self.unlogged,
                pause_ms = self.pause.as_millis() as u64,
                "accept failed; serving the connections already open"
            );
            metrics::counter!(ACCEPT_FAILED_TOTAL).increment(self.unlogged);
            self.unlogged = 0;
            self.logged_at = Some(now);
        }
        self.pause
    }
}

/// Accepts that failed (out of file descriptors, mostly).
pub(crate) const ACCEPT_FAILED_TOTAL: &str = "hopbudget_proxy_accept_failed_total";

/// Resolves on SIGTERM or Ctrl-C (SIGINT).
pub(crate) async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot watch SIGTERM; only Ctrl-C stops the proxy");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
