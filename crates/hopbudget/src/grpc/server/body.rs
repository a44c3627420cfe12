use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http::{HeaderMap, HeaderValue};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use super::future::Guard;
use crate::status::{Outcome, REFUSED_METADATA};

/// How long the layer lets a response body run (rule C13).
#[derive(Clone, Copy, Debug)]
pub(super) struct BodyLimit {
    /// When the body must have ended (request routes) or sent its first message (stream
    /// routes).
    pub(super) until: Instant,
    /// `Some(lifetime)` for a stream route: after the first message the body runs for
    /// `lifetime` instead of until the request deadline.
    pub(super) stream_lifetime: Option<Duration>,
}

pin_project! {
    /// Response body of [`GrpcServer`](super::GrpcServer): the handler's body, which closes
    /// the hop when its trailers go out (or cancels the request's tree if the client resets
    /// the stream first), or an empty body for a status the layer answered itself.
    ///
    /// A body still running at its limit is ended with DEADLINE_EXCEEDED trailers: at the
    /// request deadline for ordinary routes; for stream routes at the deadline only if no
    /// message went out yet, and otherwise at the profile's stream lifetime (C13).
    pub struct ResponseBody<B> {
        #[pin]
        inner: Option<B>,
        guard: Option<Guard>,
        limit: Option<BodyLimit>,
        // Armed only when the body is pending: a unary body that is ready at once pays for
        // no timer.
        #[pin]
        sleep: Option<Sleep>,
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
    pub(super) fn new(inner: B, guard: Option<Guard>, limit: Option<BodyLimit>) -> Self {
        Self {
            inner: Some(inner),
            guard,
            limit,
            sleep: None,
        }
    }

    pub(super) fn empty() -> Self {
        Self {
            inner: None,
            guard: None,
            limit: None,
            sleep: None,
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
        let mut this = self.project();
        let Some(inner) = this.inner.as_mut().as_pin_mut() else {
            return Poll::Ready(None);
        };
        let frame = match inner.poll_frame(cx) {
            Poll::Ready(frame) => frame,
            Poll::Pending => {
                let Some(limit) = *this.limit else {
                    return Poll::Pending;
                };
                if this.sleep.is_none() {
                    this.sleep.set(Some(tokio::time::sleep_until(limit.until)));
                }
                if let Some(sleep) = this.sleep.as_mut().as_pin_mut() {
                    ready!(sleep.poll(cx));
                }
                // The limit passed with the body still running: end it here, dropping the
                // handler's stream so whatever feeds it stops.
                this.inner.set(None);
                let mut trailers = HeaderMap::new();
                if let Some(guard) = this.guard.as_mut() {
                    guard.expire_body(&mut trailers);
                }
                return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
            }
        };
        if let Some(Ok(f)) = &frame {
            if f.is_data() {
                if let Some(lifetime) = this.limit.as_ref().and_then(|l| l.stream_lifetime) {
                    // C13: the first message is out; from now on the stream lifetime applies.
                    *this.limit = Some(BodyLimit {
                        until: Instant::now() + lifetime,
                        stream_lifetime: None,
                    });
                    this.sleep.set(None);
                    if let Some(guard) = this.guard.as_mut() {
                        guard.stream_started();
                    }
                }
            }
        }
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

/// The trailers of a body the layer ended: `grpc-status` and `grpc-message` as a
/// trailers-only response would carry them, plus the outcome mark.
pub(super) fn expired_trailers(parts: http::response::Parts, trailers: &mut HeaderMap) {
    for name in ["grpc-status", "grpc-message", REFUSED_METADATA] {
        if let Some(v) = parts.headers.get(name) {
            trailers.insert(name, v.clone());
        }
    }
    if !trailers.contains_key("grpc-status") {
        trailers.insert("grpc-status", HeaderValue::from_static("4"));
    }
}
