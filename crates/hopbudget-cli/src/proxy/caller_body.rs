//! A caller's request body, its reading bounded (#46 item 1, C27): a caller that sends a
//! head promising a body and then stalls in it is cut off once no body byte has come for
//! `--body-read-timeout` (default 30 s; nginx `client_body_timeout`, 60 s), even while its
//! budget, which may be minutes, still runs. The service's request is ended, and the caller
//! answered 408 Request Timeout with its HTTP/1.1 connection closed, as nginx does (gRPC:
//! CANCELLED, since DEADLINE_EXCEEDED is the deadline's and the caller is the one that
//! stopped; see `answer`).
//!
//! The bound is on the time between body bytes, not on the whole body: a large upload that
//! keeps coming is never cut. A body that is empty from the start (a GET) never waits, and so
//! costs nothing but the wrapper; a body that waits reads the clock once per wait after
//! progress.

use std::error::Error;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};
use tower::BoxError;

pin_project! {
    /// The body of a request from a caller, as the proxy passes it on.
    pub(crate) struct CallerBody<B> {
        #[pin]
        inner: B,
        stall: Duration,
        // Made at the first wait; moved on at the first wait after a frame came.
        sleep: Option<Pin<Box<Sleep>>>,
        progressed: bool,
    }
}

impl<B> CallerBody<B> {
    pub(crate) fn new(inner: B, stall: Duration) -> Self {
        Self {
            inner,
            stall,
            sleep: None,
            progressed: false,
        }
    }
}

impl<B: fmt::Debug> fmt::Debug for CallerBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallerBody")
            .field("inner", &self.inner)
            .field("stall", &self.stall)
            .finish_non_exhaustive()
    }
}

/// The caller sent no body byte for the bound: its request body is abandoned.
#[derive(Debug)]
pub(crate) struct BodyStalled(pub(crate) Duration);

impl fmt::Display for BodyStalled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the caller sent no request body bytes for {} ms (--body-read-timeout)",
            self.0.as_millis()
        )
    }
}

impl Error for BodyStalled {}

impl<B> Body for CallerBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        if let Poll::Ready(frame) = this.inner.poll_frame(cx) {
            *this.progressed = true;
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let stall = *this.stall;
        let sleep = match this.sleep {
            Some(sleep) => {
                if std::mem::take(this.progressed) {
                    sleep.as_mut().reset(Instant::now() + stall);
                }
                sleep
            }
            None => {
                *this.progressed = false;
                this.sleep.insert(Box::pin(tokio::time::sleep(stall)))
            }
        };
        ready!(sleep.as_mut().poll(cx));
        // Counted where the caller is answered for it (`answer`).
        Poll::Ready(Some(Err(Box::new(BodyStalled(stall)))))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Whether `error`, from a failed call to the service, is a caller's stalled body.
pub(crate) fn stalled<'a>(error: &'a (dyn Error + 'static)) -> Option<&'a BodyStalled> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(stalled) = e.downcast_ref::<BodyStalled>() {
            return Some(stalled);
        }
        next = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use http_body_util::channel::{Channel, Sender};

    fn body() -> (Sender<Bytes>, CallerBody<Channel<Bytes>>) {
        let (tx, rx) = Channel::new(4);
        (tx, CallerBody::new(rx, Duration::from_secs(30)))
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_keeps_coming_is_never_cut_and_one_that_stalls_is_cut_at_the_bound() {
        let (tx, mut body) = body();
        let start = Instant::now();
        // A chunk every 20 s for five minutes: each gap is under the bound.
        let feeder = tokio::spawn(async move {
            let mut tx = tx;
            for _ in 0..15 {
                tokio::time::sleep(Duration::from_secs(20)).await;
                tx.send_data(Bytes::from_static(b"x")).await.unwrap();
            }
            tx
        });
        for _ in 0..15 {
            body.frame().await.unwrap().unwrap();
        }
        assert_eq!(start.elapsed(), Duration::from_secs(300));
        let _tx = feeder.await.unwrap();
        // Then nothing: cut 30 s after the last chunk.
        let error = body.frame().await.unwrap().unwrap_err();
        assert_eq!(start.elapsed(), Duration::from_secs(330));
        assert!(stalled(&*error).is_some(), "{error}");
        assert!(error.to_string().contains("--body-read-timeout"), "{error}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_ends_is_passed_whole() {
        let (mut tx, body) = body();
        tx.send_data(Bytes::from_static(b"all")).await.unwrap();
        drop(tx);
        assert_eq!(&body.collect().await.unwrap().to_bytes()[..], b"all");
    }
}
