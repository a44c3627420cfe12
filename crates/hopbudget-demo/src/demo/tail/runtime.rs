//! Where every tail run runs: an HTTP/2 client set as a gRPC client sets it, and a runtime
//! of its own per run.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;

/// hyper-util's HTTP/2 client with TCP_NODELAY, as a gRPC or HTTP/2 client sets it: without
/// it a losing attempt's small reset frame can wait for the callee's delayed ACK (Nagle's
/// algorithm), 40 ms for every stream on the connection.
pub(super) fn http2_client() -> hyper_util::client::legacy::Client<HttpConnector, Full<Bytes>> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build(connector)
}

/// Run `work` on a runtime of its own (two workers, as the callee and the client share the
/// machine), so that one run's leftovers do not slow the next.
pub(super) fn on_runtime<T>(work: impl Future<Output = Result<T, String>>) -> Result<T, String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the tokio runtime: {e}"))?;
    let result = rt.block_on(work);
    rt.shutdown_timeout(Duration::from_millis(500));
    result
}
