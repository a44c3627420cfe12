//! Early answers that reach HTTP/1.x clients ([C18](crate::contract#c18), [S14](crate::contract#s14)): when the layer answers before the
//! request body was read (refused, malformed, already expired), it takes the body and reads
//! and discards it in the background, bounded by [`DRAIN_MAX_BYTES`] and [`DRAIN_MAX_TIME`],
//! and marks the answer `Connection: close`. The same happens to what is left of the body
//! when the layer answers 504 at the deadline while the handler was still waiting for it:
//! where the body is axum's own the handler reads it through the layer ([`LentBody`]), so the
//! layer still has it when it drops the handler.
//!
//! Why this is needed, from hyper 1.x's HTTP/1 server (`proto/h1/dispatch.rs`, `conn.rs`):
//! when the service drops the request body unread, the dispatcher's next read sees the body
//! receiver gone and calls `Conn::poll_drain_or_close_read`, which reads at most what is
//! already buffered and, if the body is not finished, marks reading closed and disables
//! keep-alive. Once the response is written the connection is done and the socket is closed.
//! A socket closed with unread bytes in its receive buffer, or receiving bytes after close,
//! answers with a TCP RST. A client still writing its body (Node's `http` client writes it
//! after the headers) then gets `EPIPE`/`ECONNRESET` on its write, and often reports that
//! instead of the answer already in its receive buffer.
//!
//! What hyper does if the body is *not* dropped: while the body handle is alive the dispatcher
//! keeps reading it into the handle even after the response is fully written (the connection
//! is done only when reading is done too), then closes cleanly when the response says
//! `Connection: close`. So keeping the body and draining it is enough; the answer itself goes
//! out at once and is not delayed by the upload. Holding the body inside the response body
//! instead would not work: with a known length hyper drops the response body as soon as the
//! last byte is written (the `Length` encoder reaches EOF), before it reports its end.
//!
//! nginx does the same in two steps: `ngx_http_discard_request_body` reads and discards an
//! unread body for an answer sent early, and `lingering_close on` (the default) keeps reading
//! and discarding after the answer, for up to `lingering_time` (30 s), each read waiting up to
//! `lingering_timeout` (5 s), before it closes. The bounds here are smaller, because an early
//! answer is most often a refusal made under overload.
//!
//! Not drained:
//! - At the deadline, when the request body is not axum's `Body` (which it is behind axum's
//!   router, and around a router served by `axum::serve`): the body type is then the caller's
//!   own (hyper's `Incoming`, served by hyper directly, say), which the layer cannot replace
//!   without changing the type the inner service sees, so the body stays inside the dropped
//!   handler and hyper closes the connection with it unread, as it would without the layer.
//! - HTTP/2 and later: hyper's h2 resets only the stream, with `RST_STREAM(NO_ERROR)` once the
//!   response has ended (RFC 9113 §8.1; `h2` `streams.rs` `maybe_cancel`), and the connection
//!   and its other streams go on. A `Connection` header is illegal there, so none is added.
//! - A body already known to be empty (`is_end_stream`): nothing is unread; keep-alive stays.
//! - A request with `Expect: 100-continue`: the client waits for `100 Continue` before sending
//!   its body, and reading the body would make hyper send it. Dropped instead, hyper skips the
//!   `100 Continue`, and the client, having sent nothing, sees a clean close.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Buf, Bytes};
use http::{HeaderValue, Request, Response, Version, header};
use http_body::Body;
use pin_project_lite::pin_project;
use tokio::time::Sleep;

/// The most request-body bytes read and discarded after an early answer: 1 MiB. A longer body
/// is left unread after that, and the connection closes with it unread (the client may then
/// see a reset, after it had the answer for as long as the drain took).
pub(super) const DRAIN_MAX_BYTES: u64 = 1 << 20;

/// The longest a drain runs after an early answer: 2 s, counted from the answer. A client
/// that has not finished its body by then is cut off as hyper would have done at once.
pub(super) const DRAIN_MAX_TIME: Duration = Duration::from_secs(2);

/// Prepares `answer`, made by the layer without reading `req`'s body, so that it reaches an
/// HTTP/1.x client still writing that body: adds `Connection: close` and drains the body in a
/// background task ([C18](crate::contract#c18)). Does nothing when there is nothing unread or the protocol does not
/// need it (see the module docs).
pub(super) fn answer_early<B>(req: Request<B>, mut answer: Response<Bytes>) -> Response<Bytes>
where
    B: Body + Send + 'static,
{
    match unread_body(&req) {
        Unread::Nothing => {}
        Unread::LeftToClient => close_after(&mut answer),
        Unread::ToDrain => {
            close_after(&mut answer);
            spawn_drain(req.into_body());
        }
    }
    answer
}

/// What an answer made without the handler must do about the request's body.
enum Unread {
    /// Nothing: an empty body, or HTTP/2 and later, where hyper resets only the stream.
    Nothing,
    /// `Expect: 100-continue`: the client sends nothing until told to, so the body is not
    /// read (reading would make hyper send `100 Continue`), only the connection closed.
    LeftToClient,
    /// Read and discard it, then close.
    ToDrain,
}

fn unread_body<B: Body>(req: &Request<B>) -> Unread {
    if !matches!(
        req.version(),
        Version::HTTP_09 | Version::HTTP_10 | Version::HTTP_11
    ) || req.body().is_end_stream()
    {
        return Unread::Nothing;
    }
    let expects_continue = req
        .headers()
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if expects_continue {
        Unread::LeftToClient
    } else {
        Unread::ToDrain
    }
}

/// The body is unread, so this connection cannot carry another request reliably.
fn close_after(answer: &mut Response<Bytes>) {
    answer
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
}

/// Read and discard `body` in the background, within [`DRAIN_MAX_BYTES`] and
/// [`DRAIN_MAX_TIME`].
fn spawn_drain<B: Body + Send + 'static>(body: B) {
    // Outside a Tokio runtime there is no connection to protect (hyper's server runs on
    // one); the body is dropped as before.
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(Drain {
            body,
            give_up: tokio::time::sleep(DRAIN_MAX_TIME),
            read: 0,
        });
    }
}

/// A request body the handler reads through the layer, so that the layer can still drain
/// what is left of it when it answers 504 at the deadline while the handler is waiting for
/// the body ([C18](crate::contract#c18)): the handler's future, and the body with it, is dropped then.
///
/// Only where the request body is an `axum::body::Body` (behind axum's router, and around a
/// router served by `axum::serve`, which hands every service axum's body): there the layer
/// can put its own in its place without changing the type the handler sees. Made only for a
/// body that would need draining (HTTP/1.x, not empty, no `Expect: 100-continue`): a request
/// without a body pays nothing.
#[cfg(feature = "axum")]
pub(super) struct LentBody(std::sync::Arc<std::sync::Mutex<Option<axum::body::Body>>>);

/// Without the `axum` feature no body is lent.
#[cfg(not(feature = "axum"))]
pub(super) enum LentBody {}

#[cfg(feature = "axum")]
impl LentBody {
    /// Lend `req`'s body, if it is axum's and might be left unread.
    pub(super) fn lend<B: 'static>(req: &mut Request<B>) -> Option<LentBody> {
        let req = (req as &mut dyn std::any::Any).downcast_mut::<Request<axum::body::Body>>()?;
        if !matches!(unread_body(req), Unread::ToDrain) {
            return None;
        }
        let slot = std::sync::Arc::new(std::sync::Mutex::new(Some(std::mem::take(req.body_mut()))));
        *req.body_mut() = axum::body::Body::new(Borrowed(slot.clone()));
        Some(LentBody(slot))
    }

    /// The layer answers `answer` at the deadline and the handler is gone: drain what it left
    /// of the body, and close the connection after the answer.
    pub(super) fn drain_after(self, answer: &mut Response<Bytes>) {
        let body = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(body) = body.filter(|b| !b.is_end_stream()) {
            close_after(answer);
            spawn_drain(body);
        }
    }
}

#[cfg(not(feature = "axum"))]
impl LentBody {
    pub(super) fn lend<B>(_req: &mut Request<B>) -> Option<LentBody> {
        None
    }

    pub(super) fn drain_after(self, _answer: &mut Response<Bytes>) {
        match self {}
    }
}

/// The handler's side of a [`LentBody`]: the request body, read through the shared slot.
#[cfg(feature = "axum")]
struct Borrowed(std::sync::Arc<std::sync::Mutex<Option<axum::body::Body>>>);

#[cfg(feature = "axum")]
impl Body for Borrowed {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let mut slot = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match slot.as_mut() {
            Some(body) => Pin::new(body).poll_frame(cx),
            // The layer took the rest to drain it: whoever still reads (a task the handler
            // spawned) gets an error, never an end that would pass a cut body for a whole one.
            None => Poll::Ready(Some(Err(axum::Error::new(BodyTaken)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .is_some_and(Body::is_end_stream)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .map_or_else(http_body::SizeHint::default, Body::size_hint)
    }
}

/// What a reader of a [`LentBody`] gets after the layer took the body back at the deadline.
#[cfg(feature = "axum")]
#[derive(Debug)]
struct BodyTaken;

#[cfg(feature = "axum")]
impl std::fmt::Display for BodyTaken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request's deadline passed; the server layer drains the rest of its body")
    }
}

#[cfg(feature = "axum")]
impl std::error::Error for BodyTaken {}

pin_project! {
    /// Reads and discards a request body until it ends, errors, exceeds [`DRAIN_MAX_BYTES`]
    /// or runs past [`DRAIN_MAX_TIME`]; dropping the body then lets hyper close.
    struct Drain<B> {
        #[pin]
        body: B,
        #[pin]
        give_up: Sleep,
        read: u64,
    }
}

impl<B: Body> Future for Drain<B> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut this = self.project();
        if this.give_up.as_mut().poll(cx).is_ready() {
            tracing::debug!(
                read = *this.read,
                "request body still unread after an early answer; closing"
            );
            return Poll::Ready(());
        }
        loop {
            match ready!(this.body.as_mut().poll_frame(cx)) {
                Some(Ok(frame)) => {
                    if let Some(data) = frame.data_ref() {
                        *this.read += data.remaining() as u64;
                    }
                    if *this.read > DRAIN_MAX_BYTES {
                        tracing::debug!(
                            max = DRAIN_MAX_BYTES,
                            "request body after an early answer is over the drain limit; closing"
                        );
                        return Poll::Ready(());
                    }
                }
                // Ended, or the client went away or sent a broken body: nothing left to
                // protect.
                Some(Err(_)) | None => return Poll::Ready(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{Empty, Full, StreamBody};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Lets the spawned drain run as far as it can.
    async fn settle() {
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
    }

    fn answer() -> Response<Bytes> {
        Response::new(Bytes::from_static(b"refused\n"))
    }

    /// A body of `chunks` 64 KiB chunks that counts what was taken from it.
    fn counted(
        chunks: usize,
        taken: Arc<AtomicU64>,
    ) -> impl Body<Data = Bytes, Error = std::convert::Infallible> + Send + 'static {
        let frames = (0..chunks).map(move |_| {
            taken.fetch_add(64 * 1024, Ordering::SeqCst);
            Ok(http_body::Frame::data(Bytes::from(vec![0u8; 64 * 1024])))
        });
        StreamBody::new(futures_util::stream::iter(frames))
    }

    #[tokio::test]
    async fn unread_http1_body_is_drained_and_the_connection_closed() {
        let taken = Arc::new(AtomicU64::new(0));
        let req = Request::new(counted(16, taken.clone()));
        let res = answer_early(req, answer());
        assert_eq!(res.headers()[header::CONNECTION], "close");
        settle().await;
        assert_eq!(taken.load(Ordering::SeqCst), DRAIN_MAX_BYTES);
    }

    #[tokio::test]
    async fn drain_stops_past_its_byte_limit() {
        let taken = Arc::new(AtomicU64::new(0));
        let req = Request::new(counted(64, taken.clone()));
        let _res = answer_early(req, answer());
        settle().await;
        // One chunk past the limit is read, then the body is dropped.
        assert_eq!(taken.load(Ordering::SeqCst), DRAIN_MAX_BYTES + 64 * 1024);
    }

    #[tokio::test(start_paused = true)]
    async fn drain_gives_up_at_its_time_limit() {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<
            Result<http_body::Frame<Bytes>, std::convert::Infallible>,
        >(1);
        let body = StreamBody::new(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)));
        let _res = answer_early(Request::new(body), answer());
        tokio::time::sleep(DRAIN_MAX_TIME - Duration::from_millis(1)).await;
        assert!(!tx.is_closed(), "the drain gave up early");
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert!(tx.is_closed(), "the drain still holds the body");
    }

    #[tokio::test]
    async fn empty_bodies_and_http2_keep_the_answer_as_it_is() {
        let res = answer_early(Request::new(Empty::<Bytes>::new()), answer());
        assert!(res.headers().get(header::CONNECTION).is_none());

        let mut req = Request::new(Full::new(Bytes::from_static(b"unread")));
        *req.version_mut() = Version::HTTP_2;
        let res = answer_early(req, answer());
        assert!(res.headers().get(header::CONNECTION).is_none());
    }

    #[tokio::test]
    async fn expect_continue_bodies_are_not_read() {
        let taken = Arc::new(AtomicU64::new(0));
        let mut req = Request::new(counted(1, taken.clone()));
        req.headers_mut()
            .insert(header::EXPECT, HeaderValue::from_static("100-continue"));
        let res = answer_early(req, answer());
        assert_eq!(res.headers()[header::CONNECTION], "close");
        settle().await;
        assert_eq!(taken.load(Ordering::SeqCst), 0);
    }

    #[cfg(feature = "axum")]
    #[tokio::test]
    async fn a_lent_body_taken_at_the_deadline_is_drained_and_an_error_to_its_reader() {
        use http_body_util::BodyExt;
        let taken = Arc::new(AtomicU64::new(0));
        let mut req = Request::new(axum::body::Body::new(counted(4, taken.clone())));
        let lent = LentBody::lend(&mut req).expect("an unread HTTP/1.1 body is lent");
        let mut read_by_handler = req.into_body();
        // The handler reads one chunk, then the deadline passes and the layer answers.
        let first = read_by_handler.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap().len(), 64 * 1024);
        let mut res = answer();
        lent.drain_after(&mut res);
        assert_eq!(res.headers()[header::CONNECTION], "close");
        assert!(
            read_by_handler.frame().await.unwrap().is_err(),
            "a body cut at the deadline must not read as a whole one"
        );
        settle().await;
        assert_eq!(
            taken.load(Ordering::SeqCst),
            4 * 64 * 1024,
            "the rest was drained"
        );
    }

    #[cfg(feature = "axum")]
    #[test]
    fn only_axum_bodies_that_may_be_left_unread_are_lent() {
        let mut other = Request::new(Full::new(Bytes::from_static(b"not axum's")));
        assert!(LentBody::lend(&mut other).is_none());
        let mut empty = Request::new(axum::body::Body::empty());
        assert!(LentBody::lend(&mut empty).is_none());
        let mut h2 = Request::new(axum::body::Body::from("unread"));
        *h2.version_mut() = Version::HTTP_2;
        assert!(LentBody::lend(&mut h2).is_none());
    }
}
