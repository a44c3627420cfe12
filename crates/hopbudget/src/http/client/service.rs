use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;

use super::{CallTimeout, ClientBudgetLayer, ResponseBody, ResponseFuture};
use crate::hop::outbound::{Bound, Shared, host_header};
use tower::BoxError;

use crate::macros::define_inner_service_accessors;
use crate::{budget::RequestBudget, profile::shared::SharedProfile};

/// Middleware that carries the request budget onto outbound HTTP calls.
///
/// Made by [`ClientBudgetLayer`]; see the [module docs](super).
///
/// See the [module example](super#example).
#[derive(Clone, Debug)]
pub struct ClientBudget<S> {
    pub(super) inner: S,
    pub(super) shared: Arc<Shared>,
}

impl<S> ClientBudget<S> {
    /// Wrap the client `inner` with the behaviour `profile` describes.
    ///
    /// See the [module example](super#example).
    pub fn new(inner: S, profile: impl Into<SharedProfile>) -> Self {
        ClientBudget {
            inner,
            shared: Shared::new(profile),
        }
    }

    /// A layer for this middleware.
    ///
    /// See the [module example](super#example).
    pub fn layer(profile: impl Into<SharedProfile>) -> ClientBudgetLayer {
        ClientBudgetLayer::new(profile)
    }

    define_inner_service_accessors!("client", "super#example");
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for ClientBudget<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        // C16: a timeout set on the call (an extension, or by hand in the carrier header)
        // narrows this call, never widens it.
        let hand_set = self.shared.hand_set_http(req.headers());
        let per_call = match (req.extensions().get::<CallTimeout>(), hand_set) {
            (Some(CallTimeout(set)), Some(hand)) => Some((*set).min(hand)),
            (Some(CallTimeout(set)), None) => Some(*set),
            (None, hand) => hand,
        };
        // C19: the URI's host and the `Host` header are both judged (an egress proxy on
        // loopback whose `Host` names a third party leads to the third party).
        let call = match self.shared.plan(
            req.extensions().get::<RequestBudget>(),
            per_call,
            req.uri().host(),
            host_header(req.headers()),
        ) {
            Ok(call) => call,
            // C3: refused (or already ended) before any connection is opened.
            Err(error) => return ResponseFuture::failed(error),
        };
        self.shared.stamp_http(req.headers_mut(), &call);
        // The callee's hop span continues this trace (feature `otel`).
        #[cfg(feature = "otel")]
        crate::observe::propagation::inject_current(req.headers_mut());
        let status = self.shared.status();
        let bound = Bound::new(&call);
        ResponseFuture::running(self.inner.call(req), bound, status)
    }
}

#[cfg(test)]
mod tests {
    use crate::hop::outbound::host_header;

    fn host(header: &str) -> Option<String> {
        let req = http::Request::builder()
            .header(http::header::HOST, header)
            .body(())
            .unwrap();
        host_header(req.headers()).map(str::to_owned)
    }

    #[test]
    fn the_host_header_names_a_host_without_its_port() {
        assert_eq!(host("tax.internal:8080").as_deref(), Some("tax.internal"));
        assert_eq!(host("[::1]:80").as_deref(), Some("[::1]"));
        assert_eq!(host("[::1]").as_deref(), Some("[::1]"));
        assert_eq!(host("payments").as_deref(), Some("payments"));
        let none = http::Request::new(());
        assert_eq!(
            host_header(none.headers()),
            None,
            "in process: no host named"
        );
    }
}
