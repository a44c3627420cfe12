//! Accepting callers, and stopping cleanly: on the stop signal the listener closes, idle
//! connections close, and every request in flight runs to its end, which its budget bounds
//! (at most the profile's `max_ms`), before the proxy exits.

use std::future::Future;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

use std::convert::Infallible;

use http::{Request, Response};
use hyper::body::Incoming;

use super::ProxyBody;

/// A service that keeps something per caller connection: the ingress, its connection to the
/// service (see `paired`).
pub(crate) trait PerConnection {
    /// The service for a newly accepted connection.
    fn for_connection(&self) -> Self;
}

/// Serve `service` on `listener` until `stop` resolves, then drain for at most `drain`.
/// Returns whether every connection ended within it.
pub(crate) async fn serve<S>(
    listener: TcpListener,
    service: S,
    stop: impl Future<Output = ()>,
    drain: Duration,
) -> bool
where
    S: tower::Service<Request<Incoming>, Response = Response<ProxyBody>, Error = Infallible>
        + PerConnection
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    // HTTP/1.1 and HTTP/2 with prior knowledge (h2c) on one port: gRPC callers need no TLS.
    let builder = auto::Builder::new(TokioExecutor::new());
    let graceful = GracefulShutdown::new();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    // Out of file descriptors and the like: keep serving who is connected.
                    Err(error) => {
                        tracing::warn!(%error, "accept failed");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let service = TowerToHyperService::new(service.for_connection());
                let connection = builder
                    .serve_connection(TokioIo::new(stream), service)
                    .into_owned();
                let connection = graceful.watch(connection);
                tokio::spawn(async move {
                    // A caller that leaves mid-request ends here too; its hop is recorded
                    // `cancelled` by the layer, not here.
                    if let Err(error) = connection.await {
                        tracing::debug!(%error, "connection ended with an error");
                    }
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
