use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;

use super::bound::Bound;
use super::outbound::Shared;
use super::{ClientBudgetLayer, ResponseBody, ResponseFuture};
use tower::BoxError;

use crate::{Profile, RequestBudget};

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
    pub fn new(inner: S, profile: Profile) -> Self {
        ClientBudget {
            inner,
            shared: Shared::new(profile),
        }
    }

    /// A layer for this middleware.
    ///
    /// See the [module example](super#example).
    pub fn layer(profile: Profile) -> ClientBudgetLayer {
        ClientBudgetLayer::new(profile)
    }

    /// The wrapped client.
    ///
    /// See the [module example](super#example).
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped client, mutably.
    ///
    /// See the [module example](super#example).
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwrap the inner client.
    ///
    /// See the [module example](super#example).
    pub fn into_inner(self) -> S {
        self.inner
    }
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
        // C16: a timeout set by hand in the carrier header narrows this call, never widens it.
        let per_call = self.shared.hand_set_http(req.headers());
        let call = match self.shared.plan(
            req.extensions().get::<RequestBudget>(),
            per_call,
            host_of(&req),
        ) {
            Ok(call) => call,
            // C3: refused (or already ended) before any connection is opened.
            Err(error) => return ResponseFuture::failed(error),
        };
        self.shared.stamp_http(req.headers_mut(), &call);
        // The callee's hop span continues this trace (feature `otel`).
        #[cfg(feature = "otel")]
        crate::observe::propagation::inject_current(req.headers_mut());
        let status = *self.shared.status();
        let bound = Bound::new(call.budget, call.watched, call.wait_until);
        ResponseFuture::running(self.inner.call(req), bound, status)
    }
}

/// The destination host: the URI's, else the `Host` header's (without a port).
fn host_of<B>(req: &Request<B>) -> Option<&str> {
    if let Some(host) = req.uri().host() {
        return Some(host);
    }
    let value = req.headers().get(http::header::HOST)?.to_str().ok()?;
    // `host:port`, `[v6]:port`, or a bare host.
    Some(match value.rfind(':') {
        Some(i)
            if !value[i..].contains(']')
                && (value.starts_with('[') || !value[..i].contains(':')) =>
        {
            &value[..i]
        }
        _ => value,
    })
}

#[cfg(test)]
mod tests {
    use super::host_of;

    fn host(uri: &str, header: Option<&str>) -> Option<String> {
        let mut req = http::Request::builder().uri(uri);
        if let Some(h) = header {
            req = req.header(http::header::HOST, h);
        }
        host_of(&req.body(()).unwrap()).map(str::to_owned)
    }

    #[test]
    fn the_host_comes_from_the_uri_else_the_host_header() {
        assert_eq!(
            host("http://api.stripe.com:443/x", Some("other")).as_deref(),
            Some("api.stripe.com")
        );
        assert_eq!(
            host("/x", Some("tax.internal:8080")).as_deref(),
            Some("tax.internal")
        );
        assert_eq!(host("/x", Some("[::1]:80")).as_deref(), Some("[::1]"));
        assert_eq!(host("/x", Some("[::1]")).as_deref(), Some("[::1]"));
        assert_eq!(host("/x", Some("payments")).as_deref(), Some("payments"));
        assert_eq!(
            host("/x", None),
            None,
            "in process: no destination to judge"
        );
    }
}
