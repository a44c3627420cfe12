use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use http::Response;
use pin_project_lite::pin_project;
use tokio::task::futures::TaskLocalFuture;
use tokio::time::Sleep;

use super::ResponseBody;
use super::body::BodyLimit;
use super::layer::Shared;
use crate::budget::Deadline;
use crate::context::RequestBudget;
use crate::error::BudgetError;
use crate::grpc::{budget_status, classify, status_parts};
use crate::observe::Hop;
use crate::status::Outcome;

/// The request's budget and hop, held until the call's outcome is known. Dropped without an
/// outcome means the client went away: the budget's tree is cancelled (rule C5).
#[derive(Debug)]
pub(super) struct Guard {
    budget: RequestBudget,
    hop: Option<Hop>,
    shared: Arc<Shared>,
    /// A stream route's first message went out: the request deadline no longer ends it.
    streaming: bool,
}

impl Guard {
    pub(super) fn new(budget: RequestBudget, hop: Hop, shared: Arc<Shared>) -> Self {
        Self {
            budget,
            hop: Some(hop),
            shared,
            streaming: false,
        }
    }

    pub(super) fn stream_started(&mut self) {
        self.streaming = true;
    }

    /// The body hit its limit: expire the budget, close the hop, and write the status.
    pub(super) fn expire_body(&mut self, trailers: &mut http::HeaderMap) {
        self.budget.expire();
        self.finish_at_limit();
        let parts = status_parts(budget_status(
            &BudgetError::Expired,
            self.shared.profile.grpc_status(),
        ));
        super::body::expired_trailers(parts, trailers);
    }

    fn finish_at_limit(&mut self) {
        if let Some(hop) = self.hop.take() {
            hop.finish(Outcome::Expired);
        }
    }

    pub(super) fn limit(&self, stream: bool) -> BodyLimit {
        let profile = &self.shared.profile;
        BodyLimit {
            until: self
                .budget
                .deadline()
                .saturating_sub(super::service::ANSWER_AHEAD)
                .instant(),
            stream_lifetime: stream.then(|| profile.stream_lifetime()),
        }
    }

    pub(super) fn finish(&mut self, outcome: Outcome) {
        if let Some(hop) = self.hop.take() {
            // One clock read serves both questions: late, and so expired?
            let now = tokio::time::Instant::now();
            let deadline = self.budget.deadline().instant();
            let outcome = if now > deadline && !self.streaming {
                // A response that went out after the deadline was work done for nobody.
                hop.late_work(now - deadline);
                match outcome {
                    Outcome::Completed => Outcome::Expired,
                    o => o,
                }
            } else {
                outcome
            };
            hop.finish(outcome);
        }
    }

    pub(super) fn finish_from(&mut self, headers: &http::HeaderMap) {
        let outcome = classify(headers, self.shared.profile.grpc_status());
        self.finish(outcome);
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let Some(hop) = self.hop.take() else { return };
        // The stream was reset (or the connection lost) before the call finished. A caller's
        // deadline machinery resets the stream about one network delay before our own
        // deadline (tonic clients time out at exactly the `grpc-timeout` they send, which we
        // start counting only on arrival). So a reset that comes with less than a hop's
        // reserve (margin + transit allowance) left is the caller's timer: expiry, not
        // cancellation (rule C4).
        if self.budget.remaining() <= self.budget.policy().reserve() {
            self.budget.expire();
        } else {
            self.budget.cancel();
        }
        let outcome = self
            .budget
            .end_cause()
            .map_or(Outcome::Cancelled, Outcome::from);
        hop.finish(outcome);
    }
}

pin_project! {
    /// Response future of [`GrpcServer`](super::GrpcServer).
    pub struct ResponseFuture<F> {
        #[pin]
        state: State<F>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        Running {
            // First, so that it drops first: a reset cancels the budget before the handler
            // is dropped, and the handler's own drop code sees why it stopped.
            guard: Option<Guard>,
            #[pin]
            inner: TaskLocalFuture<RequestBudget, F>,
            // Armed only once the handler returns `Pending`, as tower's `Timeout` does: a
            // handler that answers at once pays for no timer.
            #[pin]
            sleep: Option<Sleep>,
            answer_at: Deadline,
            stream: bool,
        },
        Answer {
            parts: Option<http::response::Parts>,
        },
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<F> ResponseFuture<F> {
    pub(super) fn answer(parts: http::response::Parts) -> Self {
        Self {
            state: State::Answer { parts: Some(parts) },
        }
    }

    pub(super) fn running(
        inner: TaskLocalFuture<RequestBudget, F>,
        answer_at: Deadline,
        stream: bool,
        guard: Guard,
    ) -> Self {
        Self {
            state: State::Running {
                guard: Some(guard),
                inner,
                sleep: None,
                answer_at,
                stream,
            },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<ResponseBody<B>>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let parts = match self.as_mut().project().state.project() {
            StateProj::Answer { parts } => parts.take(),
            StateProj::Running {
                inner,
                mut sleep,
                answer_at,
                stream,
                guard,
            } => {
                // The handler runs inside the hop's span, so its own spans and events nest
                // under the hop that carries the `deadline.*` fields (C14).
                let polled = {
                    let _entered = guard
                        .as_ref()
                        .and_then(|g| g.hop.as_ref())
                        .map(|hop| hop.span().enter());
                    inner.poll(cx)
                };
                if let Poll::Ready(result) = polled {
                    let response = result?;
                    let mut guard = guard.take();
                    // A trailers-only response (an error status) is final already.
                    if let Some(g) = guard.as_mut() {
                        if response.headers().contains_key("grpc-status") {
                            g.finish_from(response.headers());
                        }
                    }
                    let limit = guard.as_ref().map(|g| g.limit(*stream));
                    return Poll::Ready(Ok(
                        response.map(|body| ResponseBody::new(body, guard, limit))
                    ));
                }
                if sleep.is_none() {
                    sleep.set(Some(tokio::time::sleep_until(answer_at.instant())));
                }
                if let Some(sleep) = sleep.as_pin_mut() {
                    ready!(sleep.poll(cx));
                }
                // C4 and C7: the deadline passed with the handler still running. Mark the
                // budget expired so spawned children stop, then drop the handler.
                let mut guard = guard.take();
                let parts = guard.as_mut().map(|g| {
                    g.budget.expire();
                    g.finish(Outcome::Expired);
                    status_parts(budget_status(
                        &BudgetError::Expired,
                        g.shared.profile.grpc_status(),
                    ))
                });
                self.as_mut()
                    .project()
                    .state
                    .set(State::Answer { parts: None });
                parts
            }
        };
        match parts {
            Some(parts) => Poll::Ready(Ok(Response::from_parts(parts, ResponseBody::empty()))),
            None => Poll::Pending,
        }
    }
}
