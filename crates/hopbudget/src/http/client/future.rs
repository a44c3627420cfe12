use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;
use pin_project_lite::pin_project;
use tower::BoxError;

use super::ResponseBody;
use crate::error::BudgetError;
use crate::hop::outbound::{Bound, reply_error};
use crate::status::HttpStatusMap;

pin_project! {
    /// Response future of [`ClientBudget`](super::ClientBudget).
    ///
    /// Fails with a boxed [`BudgetError`]: `Refused` before the call started, `Expired` when
    /// the forward budget ran out or the callee answered with its expiry status, `Cancelled`
    /// when the parent budget was cancelled. Dropping the inner future aborts the call. The
    /// response's body stays bounded by the same wait ([`ResponseBody`]).
    ///
    /// See the [module example](super#example).
    pub struct ResponseFuture<F> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F> {
        Failed {
            error: Option<BudgetError>,
        },
        Running {
            #[pin]
            inner: F,
            bound: Option<Bound>,
            status: HttpStatusMap,
        },
    }
}

impl<F> ResponseFuture<F> {
    pub(super) fn failed(error: BudgetError) -> Self {
        Self {
            kind: Kind::Failed { error: Some(error) },
        }
    }

    pub(super) fn running(inner: F, bound: Bound, status: HttpStatusMap) -> Self {
        Self {
            kind: Kind::Running {
                inner,
                bound: Some(bound),
                status,
            },
        }
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Failed { error } => f
                .debug_struct("ResponseFuture")
                .field("failed", error)
                .finish(),
            Kind::Running { bound, .. } => f
                .debug_struct("ResponseFuture")
                .field("bound", bound)
                .finish(),
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    E: Into<BoxError>,
{
    type Output = Result<Response<ResponseBody<B>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Failed { error } => Poll::Ready(Err(error
                .take()
                .map_or_else(|| BudgetError::Cancelled.into(), Into::into))),
            KindProj::Running {
                inner,
                bound,
                status,
            } => {
                if let Poll::Ready(result) = inner.poll(cx) {
                    let res = result.map_err(Into::into)?;
                    // C4: a downstream expiry is an expiry here too, never a cancellation.
                    // C6: nothing here retries.
                    let Some(bound) = bound.take() else {
                        return Poll::Ready(Err(BudgetError::Cancelled.into()));
                    };
                    if let Some(error) = reply_error(
                        status,
                        res.status().as_u16(),
                        res.headers(),
                        bound.budget(),
                        bound.told(),
                    ) {
                        return Poll::Ready(Err(error.into()));
                    }
                    return Poll::Ready(Ok(res.map(|body| ResponseBody::new(body, bound))));
                }
                let Some(watch) = bound.as_mut() else {
                    return Poll::Ready(Err(BudgetError::Cancelled.into()));
                };
                // C5, C7: the parent ended, or C2/S4: the wait is over. Returning drops
                // nothing yet; the caller dropping this future aborts the call.
                watch.poll_over(cx).map(|error| Err(error.into()))
            }
        }
    }
}
