use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use http::Response;
use pin_project_lite::pin_project;
use tokio::time::Sleep;

use super::ResponseBody;
use super::method::{self, Proof};
use crate::error::BudgetError;
use crate::grpc::{budget_status, note_answer, status_parts};
use crate::hop::{HopConfig, HopGuard};
use crate::status::GrpcStatusMap;

pin_project! {
    /// Response future of [`GrpcServer`](super::GrpcServer). Like tower's futures it panics if
    /// polled again after it finished.
    ///
    /// See the [module example](super#example).
    pub struct ResponseFuture<F> {
        #[pin]
        state: State<F>,
    }

    impl<F> PinnedDrop for ResponseFuture<F> {
        fn drop(this: Pin<&mut Self>) {
            // A reset before the handler answered: the guard cancels the tree first, then the
            // handler is dropped inside the budget's scope, seeing why it stopped.
            if let StateProj::Running {
                guard, mut inner, ..
            } = this.project().state.project()
            {
                if let Some(guard) = guard.take() {
                    let budget = guard.budget().clone();
                    drop(guard);
                    budget.sync_scope(|| inner.set(None));
                }
            }
        }
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        Running {
            guard: Option<HopGuard>,
            #[pin]
            inner: Option<F>,
            // Armed only once the handler returns `Pending`, as tower's `Timeout` does: a
            // handler that answers at once pays for no timer.
            #[pin]
            sleep: Option<Sleep>,
            config: Arc<HopConfig>,
            // The profile's codes when the call arrived: a swap (C24) does not respell a
            // running call's answer.
            statuses: GrpcStatusMap,
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
        inner: F,
        guard: HopGuard,
        config: Arc<HopConfig>,
        statuses: GrpcStatusMap,
    ) -> Self {
        Self {
            state: State::Running {
                guard: Some(guard),
                inner: Some(inner),
                sleep: None,
                config,
                statuses,
            },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: http_body::Body,
{
    type Output = Result<Response<ResponseBody<B>>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let parts = match self.as_mut().project().state.project() {
            StateProj::Answer { parts } => parts.take(),
            StateProj::Running {
                guard,
                mut inner,
                mut sleep,
                config,
                statuses,
            } => {
                let (Some(g), Some(fut)) = (guard.as_mut(), inner.as_mut().as_pin_mut()) else {
                    panic!("`ResponseFuture` polled after completion");
                };
                // The handler runs inside the budget's scope and the hop's span (C11, C14).
                let polled = {
                    let _entered = g.entered();
                    fut.poll(cx)
                };
                if let Poll::Ready(result) = polled {
                    let mut guard = guard.take();
                    inner.set(None);
                    let response = match result {
                        Ok(response) => response,
                        Err(e) => {
                            // The service failed on its own and sent no answer (tonic turns
                            // the error into a status outside this layer). Not `completed`
                            // (C17): the guard is dropped as for an abandoned call, so the
                            // hop ends as the budget's end cause, `expired` past the
                            // deadline, else `cancelled`, and the call's tree ends with it.
                            drop(guard);
                            return Poll::Ready(Err(e));
                        }
                    };
                    // A trailers-only response (an error status) states its outcome now.
                    let mut open = false;
                    if let Some(g) = guard.as_mut() {
                        match method::of_head(response.status(), response.headers()) {
                            Proof::Proved => g.method_answered(config),
                            Proof::Refuted => {}
                            Proof::Open => open = true,
                        }
                        note_answer(g, response.headers(), statuses);
                    }
                    let config = config.clone();
                    return Poll::Ready(Ok(response
                        .map(|body| ResponseBody::new(body, guard, config, *statuses, open))));
                }
                if !g.budget().is_enforced() {
                    // Unenforced (C24): the handler runs to its end, whatever the deadline.
                    return Poll::Pending;
                }
                if sleep.is_none() {
                    sleep.set(Some(tokio::time::sleep_until(
                        g.budget().deadline().instant(),
                    )));
                }
                if let Some(sleep) = sleep.as_pin_mut() {
                    ready!(sleep.poll(cx));
                }
                // C4 and C7: the deadline passed with the handler still running. Mark the
                // budget expired so spawned children stop, then drop the handler in scope.
                let mut g = guard.take();
                let parts = g.as_mut().map(|g| {
                    g.expired();
                    status_parts(budget_status(&BudgetError::Expired, statuses))
                });
                match g {
                    Some(g) => g.budget().clone().sync_scope(|| inner.set(None)),
                    None => inner.set(None),
                }
                parts
            }
        };
        match parts {
            Some(parts) => Poll::Ready(Ok(Response::from_parts(parts, ResponseBody::empty()))),
            None => panic!("`ResponseFuture` polled after completion"),
        }
    }
}
