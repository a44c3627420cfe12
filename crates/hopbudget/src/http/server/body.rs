use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::Sleep;

use crate::hop::HopGuard;

pin_project! {
    /// The response body of [`ServerBudget`](super::ServerBudget): the handler's own body, a
    /// short plain-text answer the layer made itself (refused, expired, malformed), or a
    /// streaming body running under the profile's stream lifetime ([C13](crate::contract#c13)).
    ///
    /// The handler's body is polled inside the request's budget scope and hop span, and the
    /// hop's outcome is recorded when the body has gone out completely; then the request's
    /// non-detached work ends ([C17](crate::contract#c17)). Dropped before its end, the client went away ([C5](crate::contract#c5)).
    /// The inner body's error type is kept, so the layer adds no error of its own.
    ///
    /// See the [module example](super#example).
    pub struct ResponseBody<B: Body> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B: Body> {
        Inner {
            #[pin]
            body: B,
            guard: Option<HopGuard>,
            // The bytes still to hand over when the answer's length is known (see `inner`).
            left: Option<u64>,
        },
        Full {
            data: Option<Bytes>,
        },
        // One box holds all of a stream's state, so only streaming routes pay for it and
        // every other response stays small to move.
        Stream {
            state: Pin<Box<StreamState<B>>>,
        },
    }
}

pin_project! {
    #[project = StreamStateProj]
    struct StreamState<B: Body> {
        first: Option<Result<Frame<Bytes>, B::Error>>,
        // Already boxed by the layer while it waited for the first frame.
        body: Pin<Box<B>>,
        #[pin]
        lifetime: Sleep,
        ended: bool,
        guard: Option<HopGuard>,
        left: Option<u64>,
    }
}

impl<B: Body> ResponseBody<B> {
    /// The handler's body, of which `length` bytes are to go out when the answer's length is
    /// known (its `Content-Length`, its exact size hint, or zero for an answer that has no
    /// body by protocol: see [`answer_length`]).
    ///
    /// The hop completes once the last of those bytes was handed over, or the body reached
    /// its end, whichever comes first ([C17](crate::contract#c17)): hyper and axum drop a body delivered in full
    /// without polling it to its end. hyper's HTTP/1.1 writer stops at `Content-Length`; a
    /// `HEAD`, 204 or 304 answer is never polled; axum swaps a `HEAD` answer's body for an
    /// empty one. A body with nothing to send completes the hop now. Dropped with bytes still
    /// to send, the client went away ([C5](crate::contract#c5)).
    pub(super) fn inner(body: B, mut guard: Option<HopGuard>, length: Option<u64>) -> Self {
        if body.is_end_stream() || length == Some(0) {
            if let Some(mut guard) = guard.take() {
                guard.finish();
            }
        }
        Self {
            kind: Kind::Inner {
                body,
                guard,
                left: length,
            },
        }
    }

    pub(super) fn full(data: Bytes) -> Self {
        Self {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }

    /// A stream whose first frame (or error) already arrived. It runs until the budget's
    /// deadline, which the guard moved to the stream lifetime ([C13](crate::contract#c13)).
    pub(super) fn stream(
        first: Result<Frame<Bytes>, B::Error>,
        body: Pin<Box<B>>,
        guard: Option<HopGuard>,
        length: Option<u64>,
    ) -> Self {
        // The first frame counts towards the length once it is handed over, in `poll_frame`.
        let until = guard.as_ref().map_or_else(tokio::time::Instant::now, |g| {
            if g.budget().is_enforced() {
                g.budget().deadline().instant()
            } else {
                // Unenforced (C24): the stream lifetime ends nothing.
                crate::budget::deadline::far_future()
            }
        });
        Self {
            kind: Kind::Stream {
                state: Box::pin(StreamState {
                    first: Some(first),
                    body,
                    lifetime: tokio::time::sleep_until(until),
                    ended: false,
                    guard,
                    left: length,
                }),
            },
        }
    }
}

impl<B: Body> fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Inner { .. } => "inner",
            Kind::Full { .. } => "full",
            Kind::Stream { .. } => "stream",
        };
        f.debug_struct("ResponseBody").field("kind", &kind).finish()
    }
}

/// What a body's `poll_frame` returns.
type Polled<B> = Poll<Option<Result<Frame<<B as Body>::Data>, <B as Body>::Error>>>;

/// Poll `body` inside the guard's scope; finish the hop when the body has ended or the last
/// of the answer's `left` bytes was handed over.
#[inline]
fn poll_guarded<B: Body>(
    body: Pin<&mut B>,
    guard: &mut Option<HopGuard>,
    left: &mut Option<u64>,
    cx: &mut Context<'_>,
) -> Polled<B> {
    let Some(g) = guard.as_mut() else {
        return body.poll_frame(cx);
    };
    let mut body = body;
    let frame = ready!(g.enter(|| body.as_mut().poll_frame(cx)));
    // The last frame, the last byte of a known length, the end, or an error of the body's
    // own (not a deadline outcome): the answer is as complete as it will be.
    let ended = match &frame {
        Some(Ok(frame)) => handed_over(frame, left) || body.is_end_stream(),
        Some(Err(_)) | None => true,
    };
    if ended {
        if let Some(mut g) = guard.take() {
            g.finish();
        }
    }
    Poll::Ready(frame)
}

/// Count `frame`'s bytes against the answer's known length; whether none are left now.
/// hyper's HTTP/1.1 writer drops the body at this point without polling it again.
#[inline]
fn handed_over<D: bytes::Buf>(frame: &Frame<D>, left: &mut Option<u64>) -> bool {
    let (Some(n), Some(data)) = (left.as_mut(), frame.data_ref()) else {
        return false;
    };
    *n = n.saturating_sub(data.remaining() as u64);
    *n == 0
}

/// How many body bytes an answer with `parts` sends: zero when it has no body by protocol
/// (an answer to `HEAD`, a 1xx, 204 or 304: RFC 9110 §6.4.1, hyper and axum send none and
/// drop the body unpolled), else its `Content-Length`, else the body's exact size hint (which
/// hyper sends as the length), else unknown.
pub(super) fn answer_length<B: Body>(
    head_request: bool,
    parts: &http::response::Parts,
    body: &B,
) -> Option<u64> {
    let status = parts.status;
    if head_request
        || status.is_informational()
        || status == http::StatusCode::NO_CONTENT
        || status == http::StatusCode::NOT_MODIFIED
    {
        return Some(0);
    }
    let declared = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    declared.or_else(|| body.size_hint().exact())
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner { body, guard, left } => poll_guarded(body, guard, left, cx),
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            KindProj::Stream { state } => {
                let StreamStateProj {
                    first,
                    body,
                    lifetime,
                    ended,
                    guard,
                    left,
                } = state.as_mut().project();
                if let Some(first) = first.take() {
                    let last = match &first {
                        Ok(frame) => handed_over(frame, left),
                        Err(_) => true,
                    };
                    if last {
                        if let Some(mut g) = guard.take() {
                            g.finish();
                        }
                    }
                    return Poll::Ready(Some(first));
                }
                if *ended {
                    return Poll::Ready(None);
                }
                // After the first chunk the request deadline no longer applies; only the
                // stream lifetime does. It ends the stream cleanly: the client got a
                // well-formed, if shortened, stream.
                if lifetime.poll(cx).is_ready() {
                    *ended = true;
                    tracing::debug!("stream lifetime reached; ending the response stream");
                    if let Some(mut g) = guard.take() {
                        g.finish();
                    }
                    return Poll::Ready(None);
                }
                let frame = ready!(poll_guarded(body.as_mut(), guard, left, cx));
                if frame.is_none() {
                    *ended = true;
                }
                Poll::Ready(frame)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body, .. } => body.is_end_stream(),
            Kind::Full { data } => data.is_none(),
            Kind::Stream { state } => {
                state.first.is_none() && (state.ended || state.body.is_end_stream())
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body, .. } => body.size_hint(),
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            Kind::Stream { .. } => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full, StreamBody};
    use std::time::Duration;

    #[tokio::test]
    async fn full_body_yields_its_bytes_once() {
        let body = ResponseBody::<Full<Bytes>>::full(Bytes::from_static(b"deadline expired"));
        assert_eq!(body.size_hint().exact(), Some(16));
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"deadline expired");
    }

    #[tokio::test(start_paused = true)]
    async fn stream_ends_at_its_lifetime_not_before() {
        let (tx, rx) =
            tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::convert::Infallible>>(4);
        let inner = StreamBody::new(tokio_stream_from(rx));
        let budget = crate::budget::RequestBudget::local(
            Duration::from_millis(50),
            crate::budget::HopPolicy::DEFAULT,
        )
        .for_stream();
        let mut guard = crate::hop::HopGuard::new(
            budget,
            crate::observe::Hop::start(
                &crate::observe::HopLabels::new("svc", "/events", crate::observe::Protocol::Http),
                &crate::budget::RequestBudget::local(
                    Duration::from_millis(50),
                    crate::budget::HopPolicy::DEFAULT,
                ),
            ),
            Some(Duration::from_secs(10)),
        );
        guard.stream_started();
        let mut body = ResponseBody::stream(
            Ok(Frame::data(Bytes::from_static(b"first"))),
            Box::pin(inner),
            Some(guard),
            None,
        );
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&first[..], b"first");
        tx.send(Ok(Frame::data(Bytes::from_static(b"second"))))
            .await
            .unwrap();
        tokio::time::advance(Duration::from_secs(9)).await;
        let second = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&second[..], b"second");
        // Nothing more arrives: the lifetime ends the stream.
        let started = tokio::time::Instant::now();
        assert!(body.frame().await.is_none());
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        assert!(body.is_end_stream());
        drop(tx);
    }

    fn tokio_stream_from<T>(
        mut rx: tokio::sync::mpsc::Receiver<T>,
    ) -> impl futures_util::Stream<Item = T> {
        futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }
}
