use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;

use super::future::ResponseFuture;
use super::{GrpcServerLayer, ResponseBody};
use crate::error::BudgetError;
use crate::grpc::{budget_status, malformed_status, status_parts};
use crate::hop::{HopConfig, RouteLabel, Verdict, strip_internal_markers};
use crate::macros::define_inner_service_accessors;
use crate::profile::shared::SharedProfile;

/// Middleware that gives each gRPC call its [`RequestBudget`](crate::RequestBudget). See the
/// [module docs](super).
///
/// See the [module example](super#example).
#[derive(Clone, Debug)]
pub struct GrpcServer<S> {
    pub(super) inner: S,
    pub(super) config: Arc<HopConfig>,
}

impl<S> GrpcServer<S> {
    /// Wrap `inner` with the behaviour `profile` describes.
    ///
    /// See the [module example](super#example).
    pub fn new(inner: S, profile: impl Into<SharedProfile>) -> Self {
        Self {
            inner,
            config: GrpcServerLayer::new(profile).core.config().clone(),
        }
    }

    /// A layer for this middleware.
    ///
    /// See the [module example](super#example).
    pub fn layer(profile: impl Into<SharedProfile>) -> GrpcServerLayer {
        GrpcServerLayer::new(profile)
    }

    define_inner_service_accessors!("service", "super#example");
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for GrpcServer<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: http_body::Body,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        let config = &self.config;
        // The profile in force as the call arrives serves it to its end (C24).
        let profile = config.profile();
        let statuses = profile.grpc_status();
        // The budget's deadline is fixed here, in `call`: tonic arms its own `grpc-timeout`
        // timer only after this returns (see the module docs), so ours is never the later.
        let admission = config.admit_in(
            &profile,
            req.headers(),
            RouteLabel::Method(req.uri().path()),
        );
        let err = match admission {
            Verdict::Admitted(mut guard) => {
                strip_internal_markers(req.headers_mut());
                req.extensions_mut().insert(guard.budget().clone());
                // Some services do work in `call` itself; give it the scope and span too.
                let inner = {
                    let _entered = guard.entered();
                    self.inner.call(req)
                };
                return ResponseFuture::running(inner, guard, config.clone(), *statuses);
            }
            Verdict::Malformed(malformed) => {
                // C9: a malformed deadline is the client's error, never "no deadline".
                return ResponseFuture::answer(status_parts(malformed_status(
                    statuses,
                    malformed.to_string(),
                )));
            }
            Verdict::Expired => BudgetError::Expired,
            Verdict::Refused(refused) => BudgetError::Refused(refused),
        };
        ResponseFuture::answer(status_parts(budget_status(&err, statuses)))
    }
}
