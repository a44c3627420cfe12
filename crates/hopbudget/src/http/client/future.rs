use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;
use pin_project_lite::pin_project;
use tokio::time::Sleep;
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::outbound::{ended, reply_error};
use crate::status::HttpStatusMap;
use tower::BoxError;

use crate::{BudgetError, Deadline, RequestBudget};

pin_project! {
    /// Response future of [`ClientBudget`](super::ClientBudget).
    ///
    /// Fails with a boxed [`BudgetError`]: `Refused` before the call started, `Expired` when
    /// the forward budget ran out or the callee answered with its expiry status, `Cancelled`
    /// when the parent budget was cancelled. Dropping the inner future aborts the call.
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
            // Both created on the first `Pending`: a call answered at once pays for neither
            // a timer nor a cancellation token.
            #[pin]
            sleep: Option<Sleep>,
            #[pin]
            cancelled: Option<WaitForCancellationFutureOwned>,
            budget: RequestBudget,
            wait_until: Deadline,
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

    pub(super) fn running(
        inner: F,
        budget: RequestBudget,
        wait_until: Deadline,
        status: HttpStatusMap,
    ) -> Self {
        Self {
            kind: Kind::Running {
                inner,
                sleep: None,
                cancelled: None,
                budget,
                wait_until,
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
            Kind::Running { budget, .. } => f
                .debug_struct("ResponseFuture")
                .field("budget", budget)
                .finish(),
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    E: Into<BoxError>,
{
    type Output = Result<Response<B>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Failed { error } => Poll::Ready(Err(error
                .take()
                .map_or_else(|| BudgetError::Cancelled.into(), Into::into))),
            KindProj::Running {
                inner,
                mut sleep,
                mut cancelled,
                budget,
                wait_until,
                status,
            } => {
                if let Poll::Ready(result) = inner.poll(cx) {
                    let res = result.map_err(Into::into)?;
                    // C4: a downstream expiry is an expiry here too, never a cancellation.
                    // C6: nothing here retries.
                    if let Some(error) =
                        reply_error(status, res.status().as_u16(), res.headers(), budget)
                    {
                        return Poll::Ready(Err(error.into()));
                    }
                    return Poll::Ready(Ok(res));
                }
                if cancelled.is_none() {
                    cancelled.set(Some(budget.token().cancelled_owned()));
                }
                if cancelled
                    .as_mut()
                    .as_pin_mut()
                    .is_some_and(|c| c.poll(cx).is_ready())
                {
                    // C5, C7: the parent ended; dropping `inner` aborts the call.
                    return Poll::Ready(Err(ended(budget).into()));
                }
                if sleep.is_none() {
                    sleep.set(Some(tokio::time::sleep_until(wait_until.instant())));
                }
                if sleep
                    .as_mut()
                    .as_pin_mut()
                    .is_some_and(|s| s.poll(cx).is_ready())
                {
                    return Poll::Ready(Err(BudgetError::Expired.into()));
                }
                Poll::Pending
            }
        }
    }
}
