use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;

use super::outbound::Shared;
use super::{ClientBudgetLayer, ResponseFuture};
use tower::BoxError;

use crate::{Profile, RequestBudget};

/// Middleware that carries the request budget onto outbound HTTP calls.
///
/// Made by [`ClientBudgetLayer`]; see the [module docs](super).
#[derive(Clone, Debug)]
pub struct ClientBudget<S> {
    pub(super) inner: S,
    pub(super) shared: Arc<Shared>,
}

impl<S> ClientBudget<S> {
    /// Wrap the client `inner` with the behaviour `profile` describes.
    pub fn new(inner: S, profile: Profile) -> Self {
        ClientBudget {
            inner,
            shared: Shared::new(profile),
        }
    }

    /// A layer for this middleware.
    pub fn layer(profile: Profile) -> ClientBudgetLayer {
        ClientBudgetLayer::new(profile)
    }

    /// The wrapped client.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped client, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwrap the inner client.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for ClientBudget<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Error: Into<BoxError>,
{
    type Response = Response<ResBody>;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        let budget = self
            .shared
            .budget_for(req.extensions().get::<RequestBudget>());
        let forward = match budget.admit_forward() {
            Ok(forward) => forward,
            // C3: refused (or already ended) before any connection is opened.
            Err(error) => return ResponseFuture::failed(error),
        };
        self.shared.stamp(req.headers_mut(), forward);
        // The callee's hop span continues this trace (feature `otel`).
        #[cfg(feature = "otel")]
        crate::observe::propagation::inject_current(req.headers_mut());
        // The callee was told `forward`; its reply gets the transit allowance to come back;
        // the hop margin stays with this hop (S4). So the wait ends at deadline - margin.
        let wait_until = budget.deadline().saturating_sub(budget.policy().hop_margin);
        let status = *self.shared.status();
        ResponseFuture::running(self.inner.call(req), budget, wait_until, status)
    }
}
