use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use http::Response;
use pin_project_lite::pin_project;
use tokio::task::futures::TaskLocalFuture;
use tokio::time::Sleep;

use super::ResponseBody;
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
}

impl Guard {
    pub(super) fn new(budget: RequestBudget, hop: Hop, shared: Arc<Shared>) -> Self {
        Self {
            budget,
            hop: Some(hop),
            shared,
        }
    }

    pub(super) fn finish(&mut self, outcome: Outcome) {
        if let Some(hop) = self.hop.take() {
            // A response that went out after the deadline was work done for nobody.
            let now = tokio::time::Instant::now();
            let deadline = self.budget.deadline().instant();
            if now > deadline {
                hop.late_work(now - deadline);
            }
            let outcome = match (outcome, self.budget.end_cause()) {
                (Outcome::Completed, Some(crate::EndCause::Expired)) => Outcome::Expired,
                (o, _) => o,
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
        // The stream was reset (or the connection lost) before the call finished. A reset
        // that comes within the transit allowance of our deadline is the caller's own timer
        // firing (tonic clients time out at exactly the `grpc-timeout` they send): that is
        // expiry, not cancellation (rule C4).
        if self.budget.remaining() <= self.budget.policy().transit_allowance {
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
            #[pin]
            sleep: Sleep,
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
        guard: Guard,
    ) -> Self {
        Self {
            state: State::Running {
                guard: Some(guard),
                inner,
                sleep: tokio::time::sleep_until(answer_at.instant()),
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
                sleep,
                guard,
            } => {
                if let Poll::Ready(result) = inner.poll(cx) {
                    let response = result?;
                    let mut guard = guard.take();
                    // A trailers-only response (an error status) is final already.
                    if let Some(g) = guard.as_mut() {
                        if response.headers().contains_key("grpc-status") {
                            g.finish_from(response.headers());
                        }
                    }
                    return Poll::Ready(Ok(response.map(|body| ResponseBody::new(body, guard))));
                }
                ready!(sleep.poll(cx));
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
