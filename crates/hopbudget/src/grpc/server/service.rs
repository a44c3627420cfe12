use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use tower_service::Service;

use super::ResponseBody;
use super::future::{Guard, ResponseFuture};
use super::layer::Shared;
use crate::budget::Deadline;
use crate::clock::SystemClock;
use crate::codec::read_inbound;
use crate::context::{RequestBudget, Source};
use crate::error::{BudgetError, Refused};
use crate::grpc::{budget_status, status_parts};
use crate::observe::{Hop, HopLabels, Protocol, malformed_header};
use crate::status::Outcome;

/// How long before the deadline the layer answers. tonic wraps every server in its own
/// `grpc-timeout` timer *outside* all user layers, armed a few microseconds before ours, and
/// that timer answers CANCELLED; firing one millisecond (one tokio timer tick) early makes our
/// DEADLINE_EXCEEDED win every time (rule C4).
pub(super) const ANSWER_AHEAD: Duration = Duration::from_millis(1);

/// Middleware that gives each gRPC call its [`RequestBudget`]. See the [module docs](super).
#[derive(Clone, Debug)]
pub struct GrpcServer<S> {
    pub(super) inner: S,
    pub(super) shared: Arc<Shared>,
}

impl<S> GrpcServer<S> {
    /// Wrap `inner` with the budget rules of `layer`'s profile.
    pub fn new(inner: S, layer: &super::GrpcServerLayer) -> Self {
        Self {
            inner,
            shared: layer.shared.clone(),
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

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for GrpcServer<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        let shared = &self.shared;
        let profile = &shared.profile;
        let path = req.uri().path();
        let labels = HopLabels::for_route(&shared.service, path, Protocol::Grpc)
            .with_low_budget(profile.low_budget());
        let budget = match read_inbound(
            req.headers(),
            profile.inbound(),
            profile.max(),
            &SystemClock,
        ) {
            Ok(Some(inbound)) => {
                RequestBudget::from_carrier(inbound.carrier, inbound.budget, profile.policy())
            }
            Ok(None) => RequestBudget::new(
                Deadline::after(profile.edge_total()),
                Source::Fallback,
                profile.policy(),
            ),
            Err(malformed) => {
                // C9: a malformed deadline is the client's error, never "no deadline".
                malformed_header(&labels, malformed.header().as_str());
                let code = super::super::tonic_code(profile.grpc_status().malformed);
                return ResponseFuture::answer(status_parts(tonic::Status::new(
                    code,
                    malformed.to_string(),
                )));
            }
        };
        let hop = Hop::start(&labels, &budget);
        // C3: refuse before the handler runs when the route cannot finish in what is left.
        // The budget was created a moment ago, so its arrival value is what remains.
        let arrived = budget.at_arrival();
        let rule = profile.route(path);
        let min = rule.map_or(profile.policy().refuse_below, |r| r.min_budget);
        if arrived.is_zero() || arrived < min {
            let err = if arrived.is_zero() {
                // C9: a zero budget is already expired, not merely too small.
                hop.finish(Outcome::Expired);
                BudgetError::Expired
            } else {
                hop.refuse(min);
                BudgetError::Refused(Refused::new(min, arrived))
            };
            return ResponseFuture::answer(status_parts(budget_status(
                &err,
                profile.grpc_status(),
            )));
        }
        let stream = rule.is_some_and(|r| r.mode == crate::profile::RouteMode::Stream);
        req.extensions_mut().insert(budget.clone());
        // Some services do work in `call` itself; give it the ambient budget too.
        let inner = {
            let _entered = hop.span().enter();
            budget.sync_scope(|| self.inner.call(req))
        };
        let answer_at = budget.deadline().saturating_sub(ANSWER_AHEAD);
        ResponseFuture::running(
            budget.scope(inner),
            answer_at,
            stream,
            Guard::new(budget, hop, shared.clone()),
        )
    }
}
