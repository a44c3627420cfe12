use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Response;
use pin_project_lite::pin_project;
use tower::BoxError;

use super::ResponseBody;
use super::watch::{Watch, relabel_late_cancel};
use crate::budget::Deadline;
use crate::budget::RequestBudget;
use crate::error::BudgetError;
use crate::hop::outbound::{Bound, Shared};

pin_project! {
    /// Response future of [`GrpcClient`](super::GrpcClient).
    ///
    /// See the [module example](super#example).
    pub struct ResponseFuture<F> {
        #[pin]
        state: State<F>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        Waiting {
            #[pin]
            inner: F,
            bound: Option<Bound>,
            watch: Watch,
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

    pub(super) fn waiting(
        inner: F,
        bound: Bound,
        budget: RequestBudget,
        call_deadline: Deadline,
        shared: Arc<Shared>,
    ) -> Self {
        Self {
            state: State::Waiting {
                inner,
                bound: Some(bound),
                watch: Watch {
                    budget,
                    call_deadline,
                    shared,
                },
            },
        }
    }
}

/// Whether an error is tonic's own client timer (it fires at the `grpc-timeout` we stamped,
/// and tonic would call it CANCELLED).
fn is_tonic_timeout(err: &BoxError) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err.as_ref());
    while let Some(e) = cur {
        if e.is::<tonic::TimeoutExpired>() {
            return true;
        }
        cur = e.source();
    }
    false
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    E: Into<BoxError>,
{
    type Output = Result<Response<ResponseBody<B>>, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let parts = match self.as_mut().project().state.project() {
            StateProj::Answer { parts } => parts.take(),
            StateProj::Waiting {
                inner,
                bound,
                watch,
            } => {
                let parts = if let Poll::Ready(result) = inner.poll(cx) {
                    match result {
                        Ok(mut response) => {
                            relabel_late_cancel(response.headers_mut(), watch);
                            let watch = watch.clone();
                            // The body stays bounded by the same wait: a server that trickles
                            // its messages cannot hold the caller past its budget.
                            let bound = bound.take();
                            return Poll::Ready(Ok(
                                response.map(|body| ResponseBody::new(body, watch, bound))
                            ));
                        }
                        Err(err) => {
                            let err = err.into();
                            if !(is_tonic_timeout(&err) || watch.is_past_deadline()) {
                                return Poll::Ready(Err(err));
                            }
                            watch.answer(BudgetError::Expired)
                        }
                    }
                } else if let Some(Poll::Ready(err)) = bound.as_mut().map(|b| b.poll_over(cx)) {
                    // The wait is over (C2, S4), or the parent budget ended: stop waiting,
                    // which resets the stream so the downstream cancels its own tree (C5, C7).
                    watch.answer(err)
                } else {
                    return Poll::Pending;
                };
                // Drop the call now: dropping it is what resets the HTTP/2 stream.
                self.as_mut()
                    .project()
                    .state
                    .set(State::Answer { parts: None });
                Some(parts)
            }
        };
        match parts {
            Some(parts) => Poll::Ready(Ok(Response::from_parts(parts, ResponseBody::empty()))),
            None => Poll::Pending,
        }
    }
}
