//! The response body of an outbound HTTP call, bounded by the call's wait ([C2](crate::contract#c2), [C4](crate::contract#c4), [C5](crate::contract#c5)).
//!
//! The head arriving in time is not the end of the call: a body that trickles past the
//! deadline fails with [`BudgetError::Expired`](crate::BudgetError::Expired), or with the
//! parent's cause (`Cancelled`) when the request ended first, and the connection is dropped
//! with the body.

use std::pin::Pin;
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tower::BoxError;

use crate::hop::outbound::Bound;

pin_project! {
    /// Response body of [`ClientBudget`](super::ClientBudget) and of the reqwest middleware:
    /// the callee's body, cut off with a boxed [`BudgetError`](crate::BudgetError) when the
    /// call's wait ends before the body does.
    ///
    /// See the [module example](super#example), which reads one with `into_inner`.
    pub struct ResponseBody<B> {
        #[pin]
        inner: B,
        bound: Option<Bound>,
    }
}

impl<B> std::fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseBody")
            .field("bound", &self.bound)
            .finish_non_exhaustive()
    }
}

impl<B> ResponseBody<B> {
    pub(crate) fn new(inner: B, bound: Bound) -> Self {
        Self {
            inner,
            bound: Some(bound),
        }
    }

    /// The callee's body, unbounded from here on.
    ///
    /// See the [module example](super#example).
    pub fn into_inner(self) -> B {
        self.inner
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let Some(bound) = this.bound.as_mut() else {
            // Ended by the deadline: the body is over (its error was returned once).
            return Poll::Ready(None);
        };
        if let Some(error) = bound.over_now() {
            *this.bound = None;
            return Poll::Ready(Some(Err(error.into())));
        }
        if let Poll::Ready(frame) = this.inner.poll_frame(cx) {
            if frame
                .as_ref()
                .is_none_or(|f| f.as_ref().is_ok_and(Frame::is_trailers))
            {
                // Complete in time (trailers are the last frame): nothing left to bound.
                *this.bound = None;
            }
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        match bound.poll_over(cx) {
            Poll::Ready(error) => {
                *this.bound = None;
                Poll::Ready(Some(Err(error.into())))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.bound.is_none() || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
