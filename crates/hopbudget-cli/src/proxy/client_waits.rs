//! Every wait on a caller is bounded (issue #46 item 1): a connection that sends half a
//! request head and then trickles (slowloris), or sits open doing nothing, is closed, so that
//! slow or hostile callers cannot hold the proxy's connections and file descriptors.
//!
//! - **Header read** (`--header-read-timeout`, default 10 s; nginx `client_header_timeout`,
//!   Envoy `request_headers_timeout`): from the first byte of an HTTP/1.1 request head to the
//!   request reaching the proxy's stack.
//! - **Idle** (`--idle-timeout`, default 60 s; nginx `keepalive_timeout`, Envoy
//!   `idle_timeout`): no request in flight and nothing read or written.
//!
//! While a request is in flight neither applies: its budget bounds it (C4), and the deadline
//! ends it. hyper's own `header_read_timeout` cannot be used for the first: hyper starts it
//! as soon as a connection waits for a request, so it would close every idle keep-alive
//! connection at the header timeout.
//!
//! [`Watched`] wraps the caller's socket and decides at the one point it must sleep anyway
//! (a read that would block), so the cost on a busy connection is a flag per read or write
//! and one clock read per wait; [`Tracked`] counts a connection's requests in flight.
//! HTTP/2 connections (the client preface) get only the idle bound: their frames are no
//! request heads, and a gRPC client's keep-alive PINGs are not a slow head.
//!
//! One file, though long: the two bounds, the socket wrapper that applies them and the
//! request counting that tells it when a request is in flight are one mechanism; each part
//! reads the others' state.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use hopbudget::RequestBudget;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::caller_body::CallerBody;
use super::stream_deadline::{self, AnswerSlot};

/// The bounds on waiting for a caller, and on what one caller connection may hold.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClientLimits {
    pub(crate) header_read: Duration,
    pub(crate) idle: Duration,
    /// Between body bytes of a request whose body is being read (see `caller_body`).
    pub(crate) body_read: Duration,
    /// Concurrent HTTP/2 streams per connection.
    pub(crate) max_streams: u32,
}

/// The default bound on open caller connections: 90% of the file descriptors the process may
/// open (`RLIMIT_NOFILE`, from `/proc/self/limits`; 1024 where it cannot be read), halved,
/// since each HTTP/1.1 caller connection may hold one to the service. The rest is left for
/// the admin port, the exporter and the log.
pub(crate) fn default_max_connections() -> usize {
    let nofile = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("Max open files"))?;
            line.split_whitespace().nth(3)?.parse::<usize>().ok()
        })
        .unwrap_or(1024);
    (nofile / 10 * 9 / 2).max(1)
}

/// What the socket and the service share about one connection: its requests in flight, and
/// how many have started (a head that reached the stack is complete).
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    now: AtomicU32,
    started: AtomicU32,
    /// The budget of the answer being written on an HTTP/1.1 connection (see [`AnswerBy`]).
    answer: std::sync::Mutex<Option<RequestBudget>>,
}

impl InFlight {
    fn any(&self) -> bool {
        self.now.load(Ordering::Relaxed) > 0
    }

    fn started(&self) -> u32 {
        self.started.load(Ordering::Relaxed)
    }
}

/// In an answer's extensions: the budget its writing is bounded by (#46 item 2). A caller
/// that stops reading leaves the proxy's writes pending; at the deadline (for a stream
/// route, the lifetime it moved to after the first byte, C13) an HTTP/1.1 connection is
/// closed, an HTTP/2 stream reset (`stream_deadline`: one connection carries many answers,
/// and closing it for one would end the rest), and the hop ends.
#[derive(Clone, Debug)]
pub(crate) struct AnswerBy(pub(crate) RequestBudget);

/// Held while a request is in flight on a connection.
#[derive(Debug)]
pub(crate) struct Request(Arc<InFlight>);

/// A connection's count, in the extensions of a request that asks to upgrade it: a tunnel
/// holds it as a request in flight, so the caller bounds (made for request heads and idle
/// keep-alive) never cut the tunnel; `--tunnel-max` does.
#[derive(Clone, Debug)]
pub(crate) struct Connection(Arc<InFlight>);

impl Connection {
    /// Count a request in flight for as long as the returned guard lives.
    pub(crate) fn hold(&self) -> Request {
        Request::start(&self.0)
    }
}

impl Request {
    fn start(in_flight: &Arc<InFlight>) -> Self {
        in_flight.started.fetch_add(1, Ordering::Relaxed);
        in_flight.now.fetch_add(1, Ordering::Relaxed);
        Self(in_flight.clone())
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Where a connection is, as far as the bounds care.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Phase {
    /// Nothing read since the last request started (or since the connection opened).
    Idle,
    /// Bytes of a request head read, the request not yet in the stack: since when (`None`
    /// until the next wait reads the clock), and how many requests had started then.
    Head(Option<Instant>, u32),
}

/// The caller's socket, closed (a `TimedOut` error to hyper, which then drops the
/// connection) when a bound passes.
#[derive(Debug)]
pub(crate) struct Watched<IO> {
    io: IO,
    waits: ClientLimits,
    in_flight: Arc<InFlight>,
    phase: Phase,
    /// Read or written since the last wait.
    active: bool,
    /// When the idle bound runs from.
    last_active: Instant,
    /// The first bytes decide whether the head bound applies (HTTP/1.1) or not (HTTP/2).
    h2: Option<bool>,
    /// An HTTP/2 caller's frames.
    frames: Option<Box<FrameScan>>,
    /// Made when a write is first left pending: the current answer's deadline.
    write_sleep: Option<Pin<Box<Sleep>>>,
    sleep: Pin<Box<Sleep>>,
    armed: Option<Instant>,
}

/// The client preface of HTTP/2 with prior knowledge.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0";

/// Connections the proxy closed on a caller, by reason: `header_read_timeout`,
/// `idle_timeout`, `control_frame_flood`.
pub(crate) const CLOSED_TOTAL: &str = "hopbudget_proxy_connections_closed_total";

/// An HTTP/2 caller's PING and SETTINGS frames (each costs the proxy a write: the ACK) per
/// second, at most; past it the connection is closed. A client sends a few: its SETTINGS,
/// keep-alive PINGs seconds apart.
const CONTROL_FRAMES_PER_SECOND: u32 = 100;

/// Counts an HTTP/2 caller's frames that cost a write, from the bytes it sends (#46 item 3).
/// hyper and h2 offer no limit on them, so this thin layer reads the frame headers as the
/// bytes pass: no frame is parsed twice, and nothing but the headers is looked at.
#[derive(Debug)]
struct FrameScan {
    /// Preface bytes still to pass.
    preface: usize,
    /// The frame header being read, and how much of it is in.
    header: [u8; 9],
    have: usize,
    /// Payload bytes of the current frame still to pass.
    payload: usize,
    /// Control frames in the current window, and when it began.
    count: u32,
    since: Option<Instant>,
}

impl FrameScan {
    fn new() -> Self {
        Self {
            preface: 24,
            header: [0; 9],
            have: 0,
            payload: 0,
            count: 0,
            since: None,
        }
    }

    /// Pass `bytes`; `Err` once the caller's control frames went past the rate.
    fn scan(&mut self, mut bytes: &[u8]) -> Result<(), ()> {
        while !bytes.is_empty() {
            if self.preface > 0 {
                let n = self.preface.min(bytes.len());
                self.preface -= n;
                bytes = &bytes[n..];
            } else if self.payload > 0 {
                let n = self.payload.min(bytes.len());
                self.payload -= n;
                bytes = &bytes[n..];
            } else {
                let n = (9 - self.have).min(bytes.len());
                self.header[self.have..self.have + n].copy_from_slice(&bytes[..n]);
                self.have += n;
                bytes = &bytes[n..];
                if self.have == 9 {
                    self.have = 0;
                    let h = self.header;
                    self.payload =
                        usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
                    // SETTINGS (4) and PING (6) without the ACK flag (1): each is answered.
                    if matches!(h[3], 4 | 6) && h[4] & 1 == 0 {
                        self.control_frame()?;
                    }
                }
            }
        }
        Ok(())
    }

    /// One more control frame: more than the rate in a window of a second is a flood. A
    /// window starts at the first frame after the last one ended. The clock is read per
    /// control frame, which a client that keeps to the rate sends a few of.
    fn control_frame(&mut self) -> Result<(), ()> {
        let now = Instant::now();
        match self.since {
            Some(since) if now - since < Duration::from_secs(1) => {
                self.count += 1;
                if self.count > CONTROL_FRAMES_PER_SECOND {
                    return Err(());
                }
            }
            _ => {
                self.since = Some(now);
                self.count = 1;
            }
        }
        Ok(())
    }
}

impl<IO> Watched<IO> {
    pub(crate) fn new(io: IO, waits: ClientLimits, in_flight: Arc<InFlight>) -> Self {
        let now = Instant::now();
        Self {
            io,
            waits,
            in_flight,
            phase: Phase::Idle,
            active: false,
            last_active: now,
            h2: None,
            frames: None,
            write_sleep: None,
            sleep: Box::pin(tokio::time::sleep_until(now + waits.idle)),
            armed: None,
        }
    }

    /// Just read `read` (non-empty): note it; an error closes the connection.
    fn on_read(&mut self, read: &[u8]) -> io::Result<()> {
        self.active = true;
        if self.h2.is_none() {
            let n = read.len().min(H2_PREFACE.len());
            let h2 = read[..n] == H2_PREFACE[..n];
            self.h2 = Some(h2);
            if h2 {
                self.frames = Some(Box::new(FrameScan::new()));
            }
        }
        if let Some(frames) = &mut self.frames {
            if frames.scan(read).is_err() {
                metrics::counter!(CLOSED_TOTAL, "reason" => "control_frame_flood").increment(1);
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "more than {CONTROL_FRAMES_PER_SECOND} PING or SETTINGS frames in a second"
                    ),
                ));
            }
        } else if self.phase == Phase::Idle && !self.in_flight.any() {
            self.phase = Phase::Head(None, self.in_flight.started());
        }
        Ok(())
    }

    /// A read would block: whether a bound has passed, else arm the timer for the next one.
    fn on_wait(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        if let Phase::Head(_, started) = self.phase {
            if self.in_flight.started() != started {
                // The head reached the stack: it was complete.
                self.phase = Phase::Idle;
                self.active = true;
            }
        }
        if self.in_flight.any() {
            // The request's budget bounds it (C4), not these.
            self.active = true;
            return Poll::Pending;
        }
        let now = Instant::now();
        if std::mem::take(&mut self.active) {
            self.last_active = now;
        }
        let (due, what) = match self.phase {
            Phase::Head(None, started) => {
                self.phase = Phase::Head(Some(now), started);
                (now + self.waits.header_read, "header read")
            }
            Phase::Head(Some(since), _) => (since + self.waits.header_read, "header read"),
            Phase::Idle => (self.last_active + self.waits.idle, "idle"),
        };
        if now < due {
            if self.armed != Some(due) {
                self.sleep.as_mut().reset(due);
                self.armed = Some(due);
            }
            ready!(self.sleep.as_mut().poll(cx));
        }
        let reason = match what {
            "idle" => "idle_timeout",
            _ => "header_read_timeout",
        };
        metrics::counter!(CLOSED_TOTAL, "reason" => reason).increment(1);
        Poll::Ready(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("the caller's {what} timeout passed"),
        ))
    }
}

impl<IO> Watched<IO> {
    /// A write would block: past the current answer's deadline (HTTP/1.1), an error that
    /// closes the connection; before it, the timer armed for it.
    fn on_write_wait(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        if self.h2 != Some(false) {
            return Poll::Pending;
        }
        let Some(due) = self
            .in_flight
            .answer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .map(|b| b.deadline().instant())
        else {
            return Poll::Pending;
        };
        if Instant::now() < due {
            let sleep = self
                .write_sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
            if sleep.deadline() != due {
                sleep.as_mut().reset(due);
            }
            ready!(sleep.as_mut().poll(cx));
        }
        metrics::counter!(CLOSED_TOTAL, "reason" => "answer_deadline").increment(1);
        Poll::Ready(io::Error::new(
            io::ErrorKind::TimedOut,
            "the caller did not read its answer by the deadline",
        ))
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Watched<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let filled = buf.filled();
                if filled.len() > before {
                    this.on_read(&filled[before..])?;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => this.on_wait(cx).map(Err),
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Watched<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_write(cx, buf) {
            Poll::Pending => this.on_write_wait(cx).map(Err),
            Poll::Ready(n) => {
                this.active = true;
                Poll::Ready(n)
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_write_vectored(cx, bufs) {
            Poll::Pending => this.on_write_wait(cx).map(Err),
            Poll::Ready(n) => {
                this.active = true;
                Poll::Ready(n)
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_flush(cx) {
            Poll::Pending => this.on_write_wait(cx).map(Err),
            ready => ready,
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// A connection's service, counting its requests in flight for [`Watched`].
#[derive(Clone, Debug)]
pub(crate) struct Tracked<S> {
    inner: S,
    in_flight: Arc<InFlight>,
    body_read: Duration,
}

impl<S> Tracked<S> {
    pub(crate) fn new(inner: S, in_flight: Arc<InFlight>, body_read: Duration) -> Self {
        Self {
            inner,
            in_flight,
            body_read,
        }
    }
}

impl<S, B, RB> tower::Service<http::Request<B>> for Tracked<S>
where
    S: tower::Service<http::Request<CallerBody<B>>, Response = http::Response<RB>>,
    S::Future: Unpin,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = TrackedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        if req.headers().contains_key(http::header::UPGRADE) {
            req.extensions_mut()
                .insert(Connection(self.in_flight.clone()));
        }
        // An HTTP/2 stream's answer deadline goes to the stream's task, which is polling this
        // call (see `stream_deadline`).
        let stream = (req.version() == http::Version::HTTP_2)
            .then(stream_deadline::polled_stream_slot)
            .flatten();
        TrackedFuture {
            request: Request::start(&self.in_flight),
            stream,
            inner: self
                .inner
                .call(req.map(|body| CallerBody::new(body, self.body_read))),
        }
    }
}

/// The request's future; the request stops counting when it ends or is dropped. Its answer's
/// body may still be streaming then: a caller reading it is active, which keeps the idle
/// bound away.
#[derive(Debug)]
pub(crate) struct TrackedFuture<F> {
    inner: F,
    request: Request,
    /// An HTTP/2 stream's answer slot; `None` on HTTP/1.1, whose answers are bounded through
    /// the connection's [`InFlight`].
    stream: Option<AnswerSlot>,
}

impl<F, RB, E> Future for TrackedFuture<F>
where
    F: Future<Output = Result<http::Response<RB>, E>> + Unpin,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let mut out = ready!(Pin::new(&mut this.inner).poll(cx));
        if let Ok(res) = &mut out {
            // The answer's writing is bounded by its budget (see `AnswerBy`).
            let answer = res.extensions_mut().remove::<AnswerBy>().map(|a| a.0);
            let slot = match &this.stream {
                Some(stream) => stream,
                None => &this.request.0.answer,
            };
            *slot
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = answer;
        }
        Poll::Ready(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

    const WAITS: ClientLimits = ClientLimits {
        header_read: Duration::from_secs(10),
        idle: Duration::from_secs(60),
        body_read: Duration::from_secs(30),
        max_streams: 128,
    };

    async fn read_error(watched: &mut Watched<tokio::io::DuplexStream>) -> io::Error {
        let mut buf = [0u8; 64];
        loop {
            match watched.read(&mut buf).await {
                Ok(0) => panic!("closed, not timed out"),
                Ok(_) => {}
                Err(e) => return e,
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_head_that_trickles_is_cut_at_the_header_timeout_not_before() {
        let (mut caller, socket) = duplex(1024);
        let mut watched = Watched::new(socket, WAITS, Arc::default());
        let start = Instant::now();
        let trickle = tokio::spawn(async move {
            for b in b"GET / HTTP/1.1\r\nhost: x\r\n" {
                caller.write_all(&[*b]).await.unwrap();
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            caller
        });
        let e = read_error(&mut watched).await;
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(e.to_string().contains("header read"), "{e}");
        // Measured on the paused clock from the first byte, which came at once.
        assert_eq!(start.elapsed(), WAITS.header_read);
        drop(trickle);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_is_closed_at_the_idle_timeout_and_a_request_in_flight_never() {
        let (mut caller, socket) = duplex(1024);
        let in_flight = Arc::new(InFlight::default());
        let mut watched = Watched::new(socket, WAITS, in_flight.clone());
        // A whole head arrives and its request runs for longer than both bounds; nothing is
        // read meanwhile (hyper reads no further while an HTTP/1.1 request runs).
        caller.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 64];
        assert!(watched.read(&mut buf).await.unwrap() > 0);
        let request = Request::start(&in_flight);
        tokio::time::sleep(Duration::from_secs(30)).await;
        let read = tokio::time::timeout(Duration::from_secs(120), watched.read(&mut buf)).await;
        assert!(read.is_err(), "still open while the request is in flight");
        drop(request);
        let idle_from = Instant::now();
        let e = read_error(&mut watched).await;
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(e.to_string().contains("idle"), "{e}");
        assert_eq!(idle_from.elapsed(), WAITS.idle);
    }

    #[tokio::test(start_paused = true)]
    async fn a_ping_flood_closes_an_http2_connection_and_a_ping_a_second_does_not() {
        let ping = |ack: bool| {
            let mut f = vec![0, 0, 8, 6, u8::from(ack), 0, 0, 0, 0];
            f.extend_from_slice(&[0; 8]);
            f
        };
        let mut scan = FrameScan::new();
        let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        bytes.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
        assert!(scan.scan(&bytes).is_ok());
        // ACKs cost nothing; one PING a second for a long time is fine, in pieces.
        for _ in 0..1000 {
            assert!(scan.scan(&ping(true)).is_ok());
        }
        for _ in 0..300 {
            let frame = ping(false);
            let (a, b) = frame.split_at(5);
            assert!(scan.scan(a).is_ok() && scan.scan(b).is_ok());
            tokio::time::advance(Duration::from_millis(1000)).await;
        }
        // A burst past the rate within a second is a flood.
        let burst: Vec<u8> = (0..=CONTROL_FRAMES_PER_SECOND)
            .flat_map(|_| ping(false))
            .collect();
        assert!(scan.scan(&burst).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn an_http2_connection_gets_only_the_idle_bound() {
        let (mut caller, socket) = duplex(1024);
        let mut watched = Watched::new(socket, WAITS, Arc::default());
        caller
            .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 64];
        assert!(watched.read(&mut buf).await.unwrap() > 0);
        let start = Instant::now();
        let e = read_error(&mut watched).await;
        assert!(e.to_string().contains("idle"), "{e}");
        assert_eq!(start.elapsed(), WAITS.idle);
    }
}
