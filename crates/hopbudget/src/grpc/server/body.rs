use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::future::Guard;
use crate::status::Outcome;

pin_project! {
    /// Response body of [`GrpcServer`](super::GrpcServer): the handler's body, which closes
    /// the hop when its trailers go out (or cancels the request's tree if the client resets
    /// the stream first), or an empty body for a status the layer answered itself.
    pub struct ResponseBody<B> {
        #[pin]
        inner: Option<B>,
        guard: Option<Guard>,
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
    pub(super) fn new(inner: B, guard: Option<Guard>) -> Self {
        Self {
            inner: Some(inner),
            guard,
        }
    }

    pub(super) fn empty() -> Self {
        Self {
            inner: None,
            guard: None,
        }
    }
}

impl<B: Body> Body for ResponseBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let Some(inner) = this.inner.as_pin_mut() else {
            return Poll::Ready(None);
        };
        let frame = ready!(inner.poll_frame(cx));
        if let Some(guard) = this.guard.as_mut() {
            match &frame {
                Some(Ok(f)) => {
                    if let Some(trailers) = f.trailers_ref() {
                        guard.finish_from(trailers);
                    }
                }
                None => guard.finish(Outcome::Completed),
                // A body error is not a deadline outcome; the hop ran to its end.
                Some(Err(_)) => guard.finish(Outcome::Completed),
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
