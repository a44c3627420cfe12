use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::watch::{Watch, relabel_late_cancel};
use crate::hop::outbound::Bound;

pin_project! {
    /// Response body of [`GrpcClient`](super::GrpcClient): the downstream's body with a late
    /// CANCELLED in its trailers relabelled as DEADLINE_EXCEEDED, or an empty body for a
    /// status the layer answered itself. Bounded by the call's wait: when the wait ends
    /// before the body does, the downstream body is dropped (resetting the stream) and the
    /// body ends with DEADLINE_EXCEEDED trailers (CANCELLED if the request was cancelled), so a
    /// tonic client reports the right code ([C4](crate::contract#c4), [C5](crate::contract#c5)).
    ///
    /// See the [module example](super#example).
    #[project = ResponseBodyProj]
    pub struct ResponseBody<B> {
        #[pin]
        inner: Option<B>,
        watch: Option<Watch>,
        bound: Option<Bound>,
    }
}

impl<B> std::fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseBody")
            .field("answered_by_layer", &self.inner.is_none())
            .finish_non_exhaustive()
    }
}

impl<B> ResponseBody<B> {
    pub(super) fn new(inner: B, watch: Watch, bound: Option<Bound>) -> Self {
        Self {
            inner: Some(inner),
            watch: Some(watch),
            bound,
        }
    }

    pub(super) fn empty() -> Self {
        Self {
            inner: None,
            watch: None,
            bound: None,
        }
    }
}

impl<B> ResponseBodyProj<'_, B> {
    /// End the body now: drop the downstream's (which resets its stream) and finish with
    /// trailers naming why.
    fn cut_off<D, E>(&mut self, err: &crate::error::BudgetError) -> Option<Result<Frame<D>, E>> {
        *self.bound = None;
        self.inner.set(None);
        let watch = self.watch.as_ref()?;
        Some(Ok(Frame::trailers(watch.trailers(err))))
    }
}

impl<B: Body> Body for ResponseBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        let over = match this.bound.as_mut() {
            Some(bound) => bound.over_now(),
            None => None,
        };
        if let Some(err) = over {
            return Poll::Ready(this.cut_off(&err));
        }
        let Some(inner) = this.inner.as_mut().as_pin_mut() else {
            return Poll::Ready(None);
        };
        let mut frame = match inner.poll_frame(cx) {
            Poll::Ready(frame) => frame,
            Poll::Pending => {
                let Some(bound) = this.bound.as_mut() else {
                    return Poll::Pending;
                };
                let err = ready!(bound.poll_over(cx));
                return Poll::Ready(this.cut_off(&err));
            }
        };
        if frame
            .as_ref()
            .is_none_or(|f| f.as_ref().is_ok_and(Frame::is_trailers))
        {
            // Complete in time (the trailers are the last frame): nothing left to bound.
            *this.bound = None;
        }
        if let (Some(Ok(f)), Some(watch)) = (frame.as_mut(), this.watch.as_ref()) {
            if let Some(trailers) = f.trailers_mut() {
                relabel_late_cancel(trailers, watch);
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}
