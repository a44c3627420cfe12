//! The wall clock, read only to convert an absolute (epoch) deadline (rule [C1](crate::contract#c1)).
//!
//! Everything else runs on the monotonic clock. The wall clock sits behind a trait so tests and
//! the demo can skew it (scenario [S3](crate::contract#s3)) or step it mid-request (scenario [S5](crate::contract#s5)) without touching the
//! machine's time: implement [`WallClock`] and hand it to a layer's `with_wall_clock` or a queue
//! stamper's or gate's `with_wall_clock`.
//!
//! See the example on [`WallClock`].
//!
//! Guide: *Budgets, carriers and retries*, `docs/guide/concepts.md` in the repository.

#[cfg(test)]
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock time in Unix milliseconds.
///
/// # Examples
///
/// A host whose clock runs 300 ms fast (scenario [S3](crate::contract#s3)): an absolute deadline 400 ms away on the
/// caller's clock is 100 ms away on this one. The server layers take a clock the same way
/// (`ServerBudgetLayer::with_wall_clock`, `GrpcServerLayer::with_wall_clock`).
///
/// ```
/// use std::sync::Arc;
/// use hopbudget::Profile;
/// use hopbudget::clock::{SystemClock, WallClock};
/// use hopbudget::queue::Gate;
///
/// #[derive(Debug)]
/// struct Fast(u64);
///
/// impl WallClock for Fast {
///     fn now_unix_ms(&self) -> u64 {
///         SystemClock.now_unix_ms() + self.0
///     }
/// }
///
/// let clock = Arc::new(Fast(300));
/// assert!(clock.now_unix_ms() >= SystemClock.now_unix_ms() + 299);
/// let gate = Gate::new(&Profile::default(), "orders").with_wall_clock(clock);
/// # let _ = gate;
/// ```
pub trait WallClock: Send + Sync + std::fmt::Debug {
    /// Milliseconds since the Unix epoch, now.
    ///
    /// See the [example](WallClock#examples).
    fn now_unix_ms(&self) -> u64;
}

/// The machine's real wall clock: the default everywhere a wall clock is read.
///
/// See the [example](WallClock#examples).
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

/// The real wall clock shifted by a fixed offset: a host whose clock is ahead or behind.
/// For tests.
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct SkewedClock {
    offset_ms: AtomicI64,
}

#[cfg(test)]
impl SkewedClock {
    /// A clock `offset_ms` ahead of the real one (negative: behind).
    pub(crate) const fn new(offset_ms: i64) -> Self {
        Self {
            offset_ms: AtomicI64::new(offset_ms),
        }
    }
}

#[cfg(test)]
impl WallClock for SkewedClock {
    fn now_unix_ms(&self) -> u64 {
        let real = SystemClock.now_unix_ms();
        real.saturating_add_signed(self.offset_ms.load(Ordering::SeqCst))
    }
}

/// A wall clock that reads only what it is told: tests set and advance it by hand, so an
/// absolute deadline (a queue message's `deadline-epoch-ms`) can be checked to the millisecond.
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct ManualClock {
    now_ms: AtomicU64,
}

#[cfg(test)]
impl ManualClock {
    /// A clock reading `now_unix_ms` until moved.
    pub(crate) const fn new(now_unix_ms: u64) -> Self {
        Self {
            now_ms: AtomicU64::new(now_unix_ms),
        }
    }

    /// Move the clock forward by `ms`.
    pub(crate) fn advance(&self, ms: u64) {
        self.now_ms.fetch_add(ms, Ordering::SeqCst);
    }

    /// Set the clock to `now_unix_ms`.
    pub(crate) fn set(&self, now_unix_ms: u64) {
        self.now_ms.store(now_unix_ms, Ordering::SeqCst);
    }
}

#[cfg(test)]
impl WallClock for ManualClock {
    fn now_unix_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}
