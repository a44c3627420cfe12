//! A deadline pinned to this process's monotonic clock (rule [C1](crate::contract#c1)).
//!
//! Everything that does time arithmetic in hopbudget goes through [`Deadline`]. It wraps
//! [`tokio::time::Instant`] rather than `std`'s so that tests can pause and advance time
//! exactly (`tokio::time::pause`), and it never panics: every operation saturates, so
//! `Duration::MAX` is a valid (if generous) budget and "already past" is simply zero.

use std::time::Duration;

use tokio::time::Instant;

/// How far ahead a deadline is pinned when the requested budget would overflow the clock.
///
/// About 30 years, the same horizon tokio uses for its own "far future" timers: long enough to
/// mean "no practical limit", short enough that adding it to `now` cannot overflow.
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// An instant on the monotonic clock by which a request's work must be done.
///
/// A `Deadline` is `Copy` and cheap: reading [`remaining`](Self::remaining) costs one clock read
/// and a subtraction. Wall-clock steps (NTP corrections) cannot move it (rule [C1](crate::contract#c1), scenario [S5](crate::contract#s5)).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use hopbudget::Deadline;
/// use tokio::time::Instant;
///
/// let deadline = Deadline::after(Duration::from_millis(500));
/// tokio::time::advance(Duration::from_millis(120)).await;
/// assert_eq!(deadline.remaining(), Duration::from_millis(380));
/// assert!(!deadline.is_expired());
///
/// // The same instant, built from a start you already read.
/// let start = Instant::now();
/// let from_start = Deadline::after_from(start, Duration::from_millis(380));
/// assert_eq!(from_start, deadline);
/// assert_eq!(Deadline::at(deadline.instant()), deadline);
/// assert_eq!(deadline.remaining_at(start + Duration::from_millis(80)), Duration::from_millis(300));
///
/// // What a client waits for: the deadline minus the hop margin; the tighter of two wins.
/// let wait_until = deadline.saturating_sub(Duration::from_millis(5));
/// assert_eq!(wait_until.remaining(), Duration::from_millis(375));
/// assert_eq!(deadline.min(wait_until), wait_until);
///
/// tokio::time::advance(Duration::from_millis(380)).await;
/// assert!(deadline.is_expired());
/// assert_eq!(deadline.remaining(), Duration::ZERO);
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Deadline {
    at: Instant,
}

/// An instant about 30 years out: a timer that never fires in practice (an unenforced
/// budget's stream lifetime, rule [C24](crate::contract#c24)).
pub(crate) fn far_future() -> Instant {
    Deadline::after(Duration::MAX).instant()
}

impl Deadline {
    /// A deadline `budget` from now. A budget too large for the clock is capped about 30 years
    /// out instead of panicking.
    ///
    /// See the [example](Self#examples).
    pub fn after(budget: Duration) -> Self {
        Self::after_from(Instant::now(), budget)
    }

    /// A deadline `budget` after `start`, saturating like [`after`](Self::after).
    ///
    /// See the [example](Self#examples).
    pub fn after_from(start: Instant, budget: Duration) -> Self {
        let at = start
            .checked_add(budget)
            .or_else(|| start.checked_add(FAR_FUTURE))
            .unwrap_or(start);
        Self { at }
    }

    /// A deadline at an instant already known.
    ///
    /// See the [example](Self#examples).
    pub const fn at(at: Instant) -> Self {
        Self { at }
    }

    /// The instant this deadline falls on.
    ///
    /// See the [example](Self#examples).
    pub const fn instant(&self) -> Instant {
        self.at
    }

    /// Time left before the deadline; zero once it has passed.
    ///
    /// See the [example](Self#examples).
    #[inline]
    pub fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    /// Time left as seen from `now`; zero if `now` is at or past the deadline.
    ///
    /// See the [example](Self#examples).
    #[inline]
    pub fn remaining_at(&self, now: Instant) -> Duration {
        self.at.saturating_duration_since(now)
    }

    /// Whether the deadline has been reached. A deadline is expired *at* its instant: a budget
    /// of zero is already spent (rule [C9](crate::contract#c9)).
    ///
    /// See the [example](Self#examples).
    #[inline]
    pub fn is_expired(&self) -> bool {
        Instant::now() >= self.at
    }

    /// A deadline `by` earlier than this one; it never moves before the clock's origin.
    ///
    /// See the [example](Self#examples).
    pub fn saturating_sub(&self, by: Duration) -> Self {
        // `Instant` has no saturating subtraction; fall back to "now minus nothing" which,
        // for an expired-anyway deadline, is just as expired.
        let at = self.at.checked_sub(by).unwrap_or_else(|| {
            let now = Instant::now();
            if now < self.at { now } else { self.at }
        });
        Self { at }
    }

    /// The earlier of two deadlines: the tighter one wins.
    ///
    /// See the [example](Self#examples).
    pub fn min(self, other: Self) -> Self {
        if other.at < self.at { other } else { self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn remaining_counts_down_and_saturates_at_zero() {
        let d = Deadline::after(Duration::from_millis(100));
        assert_eq!(d.remaining(), Duration::from_millis(100));
        assert!(!d.is_expired());
        tokio::time::advance(Duration::from_millis(99)).await;
        assert_eq!(d.remaining(), Duration::from_millis(1));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(d.remaining(), Duration::ZERO);
        assert!(d.is_expired(), "a deadline is expired at its instant");
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(d.remaining(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn zero_budget_is_already_expired() {
        assert!(Deadline::after(Duration::ZERO).is_expired());
    }

    #[tokio::test(start_paused = true)]
    async fn duration_max_does_not_panic_and_is_far_away() {
        let d = Deadline::after(Duration::MAX);
        assert!(d.remaining() >= FAR_FUTURE - Duration::from_secs(1));
        assert!(!d.is_expired());
        let earlier = d.saturating_sub(Duration::MAX);
        assert!(earlier <= d);
    }

    #[tokio::test(start_paused = true)]
    async fn min_picks_the_tighter_deadline() {
        let a = Deadline::after(Duration::from_millis(10));
        let b = Deadline::after(Duration::from_millis(20));
        assert_eq!(a.min(b), a);
        assert_eq!(b.min(a), a);
        assert_eq!(
            b.saturating_sub(Duration::from_millis(15)).remaining(),
            Duration::from_millis(5)
        );
    }
}
