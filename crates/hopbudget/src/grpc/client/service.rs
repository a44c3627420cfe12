use std::sync::Arc;
use std::task::{Context, Poll};

use http::header::HeaderName;
use http::{Request, Response};
use tower_service::Service;

use super::ResponseBody;
use super::future::ResponseFuture;
use crate::budget::Deadline;
use crate::codec::grpc_timeout;
use crate::context::{RequestBudget, Source};
use crate::grpc::{budget_status, status_parts};
use crate::profile::Profile;
use tower::BoxError;

const GRPC_TIMEOUT: HeaderName = HeaderName::from_static(crate::codec::GRPC_TIMEOUT);

/// Middleware that forwards the current budget on every gRPC call. See the
/// [module docs](super).
#[derive(Clone, Debug)]
pub struct GrpcClient<S> {
    pub(super) inner: S,
    pub(super) profile: Arc<Profile>,
}

impl<S> GrpcClient<S> {
    /// Wrap `inner` with the rules of `layer`'s profile.
    pub fn new(inner: S, layer: &super::GrpcClientLayer) -> Self {
        Self {
            inner,
            profile: layer.profile.clone(),
        }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Unwrap the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for GrpcClient<S>
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
        let profile = &self.profile;
        let budget = req
            .extensions()
            .get::<RequestBudget>()
            .cloned()
            .or_else(RequestBudget::current)
            .unwrap_or_else(|| {
                // C8: a call made outside any request still gets a finite budget.
                RequestBudget::new(
                    Deadline::after(profile.edge_total()),
                    Source::Fallback,
                    profile.policy(),
                )
            });
        // C3: below the threshold nothing is sent, not even a connection attempt.
        let forward = match budget.admit_forward() {
            Ok(forward) => forward,
            Err(err) => {
                return ResponseFuture::answer(status_parts(budget_status(
                    &err,
                    profile.grpc_status(),
                )));
            }
        };
        // C2: stamp what the downstream may use, replacing whatever the caller set.
        req.headers_mut().insert(
            GRPC_TIMEOUT,
            grpc_timeout::encode(forward).to_header_value(),
        );
        // The callee's hop span continues this trace (feature `otel`).
        #[cfg(feature = "otel")]
        crate::observe::propagation::inject_current(req.headers_mut());
        let call_deadline = Deadline::after(forward);
        // The hop margin stays with this hop: the wait ends when only the margin is left.
        let wait_until = budget.deadline().saturating_sub(budget.policy().hop_margin);
        let cancelled = budget.token().cancelled_owned();
        ResponseFuture::waiting(
            self.inner.call(req),
            wait_until,
            cancelled,
            budget,
            call_deadline,
            profile.clone(),
        )
    }
}
