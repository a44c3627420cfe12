//! The wall clock, read only to convert an absolute (epoch) deadline (rule C1).
//!
//! Everything else runs on the monotonic clock. The wall clock sits behind a trait so tests and
//! the demo can skew it (scenario S3) or step it mid-request (scenario S5) without touching the
//! machine's time.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock time in Unix milliseconds.
pub trait WallClock: Send + Sync + std::fmt::Debug {
    /// Milliseconds since the Unix epoch, now.
    fn now_unix_ms(&self) -> u64;
}

/// The machine's real wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl WallClock for SystemClock {
    fn now_unix_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}

/// The real wall clock shifted by an adjustable offset: a host whose clock is ahead or behind,
/// or one that NTP steps while a request is in flight.
///
/// ```
/// use hopbudget::clock::{SkewedClock, WallClock, SystemClock};
///
/// let ahead = SkewedClock::new(300); // this host's clock is 300 ms fast
/// assert!(ahead.now_unix_ms() >= SystemClock.now_unix_ms() + 299);
/// ahead.step(-200); // an NTP correction steps it back 200 ms
/// ```
#[derive(Debug, Default)]
pub struct SkewedClock {
    offset_ms: AtomicI64,
}

impl SkewedClock {
    /// A clock `offset_ms` ahead of the real one (negative: behind).
    pub const fn new(offset_ms: i64) -> Self {
        Self {
            offset_ms: AtomicI64::new(offset_ms),
        }
    }

    /// Step the clock by `delta_ms`, as an NTP correction would.
    pub fn step(&self, delta_ms: i64) {
        self.offset_ms.fetch_add(delta_ms, Ordering::SeqCst);
    }
}

impl WallClock for SkewedClock {
    fn now_unix_ms(&self) -> u64 {
        let real = SystemClock.now_unix_ms();
        real.saturating_add_signed(self.offset_ms.load(Ordering::SeqCst))
    }
}

/// A wall clock that reads only what it is told: tests set and advance it by hand, so an
/// absolute deadline (a queue message's `deadline-epoch-ms`) can be checked to the millisecond.
///
/// ```
/// use hopbudget::clock::{ManualClock, WallClock};
///
/// let clock = ManualClock::new(1_800_000_000_000);
/// clock.advance(250);
/// assert_eq!(clock.now_unix_ms(), 1_800_000_000_250);
/// ```
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ms: std::sync::atomic::AtomicU64,
}

impl ManualClock {
    /// A clock reading `now_unix_ms` until moved.
    pub const fn new(now_unix_ms: u64) -> Self {
        Self {
            now_ms: std::sync::atomic::AtomicU64::new(now_unix_ms),
        }
    }

    /// Move the clock forward by `ms`.
    pub fn advance(&self, ms: u64) {
        self.now_ms.fetch_add(ms, Ordering::SeqCst);
    }

    /// Set the clock to `now_unix_ms`.
    pub fn set(&self, now_unix_ms: u64) {
        self.now_ms.store(now_unix_ms, Ordering::SeqCst);
    }
}

impl WallClock for ManualClock {
    fn now_unix_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}
