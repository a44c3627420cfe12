//! What the HTTP layer benches share: the instant service every stack wraps.

use std::convert::Infallible;
use std::future::Ready;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use tower::Service;

/// The request every in-process HTTP stack is called with.
pub(crate) type Req = Request<Full<Bytes>>;

/// A service that answers `ok` at once: the floor every layer is measured against.
#[derive(Clone, Copy)]
pub(crate) struct Bare;

impl Service<Req> for Bare {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Req) -> Self::Future {
        std::future::ready(Ok(Response::new(Full::new(Bytes::from_static(b"ok")))))
    }
}

/// Stands in for the extensions axum's router has inserted (`MatchedPath`, `OriginalUri`) by
/// the time a layer added with `Router::layer` sees a request; only its presence matters.
#[derive(Clone)]
pub(crate) struct RoutedBy;

/// A whole axum app with one route, `/quote`, answering `ok` at once: what a layer wrapped
/// around the router (as `axum::serve` runs it) sees behind it.
#[cfg(feature = "axum")]
#[allow(dead_code)] // `http_layers` does not use it
pub(crate) fn quote_app() -> axum::Router {
    axum::Router::new().route("/quote", axum::routing::get(|| async { "ok" }))
}
