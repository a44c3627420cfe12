//! The SRE throttle's state: requests and accepts over a sliding window of time slices, and
//! the deterministic draw that rejects an attempt with the formula's probability.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Time slices in the window: counts older than the window fall out one slice at a time.
const SLICES: usize = 8;

#[derive(Clone, Copy, Debug, Default)]
struct Slice {
    /// Which slice of time this row holds, plus one; zero for a row never used.
    epoch: u64,
    requests: u64,
    accepts: u64,
}

#[derive(Debug)]
struct State {
    slices: [Slice; SLICES],
    /// Rejection probability summed since the last local rejection.
    credit: f64,
}

/// Client-side adaptive throttling for retries and hedges (Google SRE; `K = 2` by default).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use hopbudget::throttle::AdaptiveThrottle;
///
/// let throttle = AdaptiveThrottle::new();
/// // The callee accepts 1 call in 3 (3x overload): K = 2 lets 2/3 of extra attempts through.
/// for n in 0..300 {
///     throttle.record(n % 3 == 0);
/// }
/// let p = throttle.reject_probability();
/// assert!((p - 1.0 / 3.0).abs() < 0.01, "{p}");
/// let sent = (0..300).filter(|_| throttle.try_send()).count();
/// assert!(sent < 200, "{sent} of 300 extra attempts sent");
/// // The locally rejected ones count as requests the callee did not accept.
/// assert_eq!(throttle.counts(), (300 + (300 - sent as u64), 100));
/// # }
/// ```
#[derive(Debug)]
pub struct AdaptiveThrottle {
    k: f64,
    origin: Instant,
    slice: Duration,
    state: Mutex<State>,
}

impl Default for AdaptiveThrottle {
    fn default() -> Self {
        Self::new()
    }
}

impl AdaptiveThrottle {
    /// `K = 2` over a two-minute window, as the SRE book suggests.
    ///
    /// See the [example](Self#examples).
    pub fn new() -> Self {
        Self::with(2.0, Duration::from_secs(120))
    }

    /// A multiplier `k` (lower rejects earlier; at least 1) over a `window` (at least 8 ms).
    ///
    /// See the [example](Self#examples).
    pub fn with(k: f64, window: Duration) -> Self {
        let slice = (window / SLICES as u32).max(Duration::from_millis(1));
        Self {
            k: if k.is_nan() { 2.0 } else { k.max(1.0) },
            origin: Instant::now(),
            slice,
            state: Mutex::new(State {
                slices: [Slice::default(); SLICES],
                credit: 0.0,
            }),
        }
    }

    /// Count one attempt that reached the callee, and whether the callee accepted it (an
    /// answer, or a failure that was not a refusal or an overload).
    ///
    /// See the [example](Self#examples).
    pub fn record(&self, accepted: bool) {
        let mut state = self.lock();
        let row = self.row(&mut state);
        row.requests += 1;
        row.accepts += u64::from(accepted);
    }

    /// Whether an extra attempt (a retry or a hedge) may be sent. `false` rejects it locally,
    /// and counts it as a request that was not accepted; a `true` is counted by
    /// [`record`](Self::record) once its answer comes.
    ///
    /// See the [example](Self#examples).
    pub fn try_send(&self) -> bool {
        let mut state = self.lock();
        let p = self.probability(&state);
        state.credit += p;
        if state.credit >= 1.0 {
            state.credit -= 1.0;
            self.row(&mut state).requests += 1;
            return false;
        }
        true
    }

    /// `max(0, (requests - K * accepts) / (requests + 1))` over the window now.
    ///
    /// See the [example](Self#examples).
    pub fn reject_probability(&self) -> f64 {
        let state = self.lock();
        self.probability(&state)
    }

    /// The attempts counted in the window now, and how many of them the callee accepted.
    ///
    /// See the [example](Self#examples).
    pub fn counts(&self) -> (u64, u64) {
        let state = self.lock();
        self.sums(&state)
    }

    fn sums(&self, state: &State) -> (u64, u64) {
        let now = self.epoch();
        state
            .slices
            .iter()
            .filter(|s| s.epoch != 0 && s.epoch + SLICES as u64 > now)
            .fold((0, 0), |(r, a), s| (r + s.requests, a + s.accepts))
    }

    fn probability(&self, state: &State) -> f64 {
        let (requests, accepts) = self.sums(state);
        let requests = requests as f64;
        ((requests - self.k * accepts as f64) / (requests + 1.0)).max(0.0)
    }

    /// The current slice's row, cleared when its slice of time comes round again.
    fn row<'a>(&self, state: &'a mut State) -> &'a mut Slice {
        let now = self.epoch();
        let row = &mut state.slices[(now as usize) % SLICES];
        if row.epoch != now {
            *row = Slice {
                epoch: now,
                ..Slice::default()
            };
        }
        row
    }

    /// The current slice number, plus one (zero marks a row never used).
    fn epoch(&self) -> u64 {
        let since = self.origin.elapsed().as_nanos() / self.slice.as_nanos().max(1);
        u64::try_from(since).unwrap_or(u64::MAX - 1) + 1
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while counting leaves the counts usable: recover them.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_sre_formula_with_k_2() {
        let t = AdaptiveThrottle::new();
        assert_eq!(
            t.reject_probability(),
            0.0,
            "nothing seen: nothing rejected"
        );
        // Half accepted: K = 2 rejects nothing.
        for n in 0..100 {
            t.record(n % 2 == 0);
        }
        assert_eq!(t.reject_probability(), 0.0);
        assert!((0..100).all(|_| t.try_send()));
        // Then 100 refusals: 200 requests, 50 accepts: (200 - 100) / 201.
        for _ in 0..100 {
            t.record(false);
        }
        assert!((t.reject_probability() - 100.0 / 201.0).abs() < 1e-9);
    }

    #[tokio::test(start_paused = true)]
    async fn a_local_rejection_counts_as_a_request() {
        let t = AdaptiveThrottle::new();
        for _ in 0..10 {
            t.record(false);
        }
        // 10 / 11: the first draw is below one, the second passes it.
        assert!(t.try_send());
        assert!(!t.try_send());
        assert!((t.reject_probability() - 11.0 / 12.0).abs() < 1e-9);
    }

    #[tokio::test(start_paused = true)]
    async fn old_refusals_fall_out_of_the_window() {
        let t = AdaptiveThrottle::with(2.0, Duration::from_secs(8));
        for _ in 0..100 {
            t.record(false);
        }
        assert!(t.reject_probability() > 0.9);
        tokio::time::advance(Duration::from_secs(4)).await;
        assert!(
            t.reject_probability() > 0.9,
            "half a window later: still counted"
        );
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(t.reject_probability(), 0.0, "a window later: forgotten");
    }
}
