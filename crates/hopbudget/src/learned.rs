//! A refuse threshold learned from the service's own latency (rule [C3](crate::contract#c3), kept honest over time).
//!
//! A route's static `min_budget_ms` is a guess written down once; the route's real cost moves
//! with load, data and deploys. A [`LearnedThreshold`] records how long the route's own work
//! took over a sliding window and refuses below `max(static, learned)`, where *learned* is a
//! quantile of that window: p50 by default (refuse work that would more likely than not miss),
//! p99 for strict routes (start only work that nearly always fits).
//!
//! Memory is fixed: the window is a ring of [`SLICES`] time slices, each a row of log-scale
//! buckets (eight per power of two, at most 12.5% apart, like an HDR histogram with one
//! significant digit), about 9 KiB per route whatever the traffic. Recording is one clock
//! read, one atomic load and one atomic add; reading the threshold is two atomic loads, and
//! the quantile is recomputed at most once per slice. Until the window holds `min_samples`
//! latencies (cold start, or a route so starved that nothing ran for a whole window) the
//! static value applies alone.
//!
//! See the example on [`LearnedThreshold`]; a profile turns it on per route with `learn:`
//! (the example on [`Profile`](crate::Profile) reads a route's rule).
//!
//! Guide: *The adoption profile*, `docs/guide/profile.md` in the repository.

use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// Time slices in the sliding window: the learned value moves once per `window / SLICES`.
///
/// See the example on [`LearnedThreshold`], which waits one slice.
pub const SLICES: usize = 8;

/// Below this many microseconds every value has its own bucket.
const EXACT: u64 = 16;
/// Sub-buckets per power of two, as a shift: 8 per octave.
const SUB_BITS: u32 = 3;
/// Latencies are capped here (2^36 us, about 19 hours): larger ones count in the last bucket.
const MAX_EXP: u32 = 35;
const FIRST_EXP: u32 = 4; // log2(EXACT)
const BUCKETS: usize = EXACT as usize + (((MAX_EXP - FIRST_EXP + 1) as usize) << SUB_BITS);

/// How a route learns its threshold: which quantile, over how long, from how many samples.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use hopbudget::learned::LearnConfig;
///
/// assert_eq!(LearnConfig::default(), LearnConfig::P50);
/// assert_eq!(LearnConfig::STRICT.quantile, 0.99);
/// // p90 over 30 s: a profile's `learn: {quantile: 0.9, window_ms: 30000}`.
/// let p90 = LearnConfig { quantile: 0.9, window: Duration::from_secs(30), ..LearnConfig::P50 };
/// assert_eq!(p90.min_samples, 20);
/// ```
///
/// A threshold learning with it: see the example on [`LearnedThreshold`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LearnConfig {
    /// The quantile of recent latencies to refuse below, in `(0, 1]`: 0.5 for p50.
    pub quantile: f64,
    /// The sliding window's length.
    pub window: Duration,
    /// Fewer latencies than this in the window and the static threshold applies alone.
    pub min_samples: u32,
}

impl LearnConfig {
    /// p50 over one minute, from at least 20 samples: refuse work that would more likely than
    /// not miss its deadline.
    ///
    /// See the [example](LearnConfig#examples).
    pub const P50: LearnConfig = LearnConfig {
        quantile: 0.5,
        window: Duration::from_secs(60),
        min_samples: 20,
    };

    /// p99 over one minute, for strict routes: start only work that nearly always fits.
    ///
    /// See the [example](LearnConfig#examples).
    pub const STRICT: LearnConfig = LearnConfig {
        quantile: 0.99,
        ..Self::P50
    };
}

impl Default for LearnConfig {
    fn default() -> Self {
        Self::P50
    }
}

struct Slice {
    /// Which slice of time this row holds, plus one; zero for a row never used.
    epoch: AtomicU64,
    counts: [AtomicU32; BUCKETS],
}

impl Slice {
    const fn new() -> Self {
        Self {
            epoch: AtomicU64::new(0),
            counts: [const { AtomicU32::new(0) }; BUCKETS],
        }
    }
}

/// One route's learned refuse threshold: `max(static, quantile of recent latency)`.
///
/// Share one per route (it is `Sync`; the profile keeps it in an `Arc`), call
/// [`record`](Self::record) with each completed request's own latency and
/// [`threshold`](Self::threshold) when admitting the next one.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use hopbudget::learned::{LearnConfig, LearnedThreshold, SLICES};
/// use tokio::time::Instant;
///
/// let ms = Duration::from_millis;
/// let learned = LearnedThreshold::new(ms(50), LearnConfig::P50);
/// assert_eq!((learned.static_min(), learned.config()), (ms(50), &LearnConfig::P50));
/// assert_eq!(learned.threshold(), ms(50), "cold start: the static value");
/// assert_eq!(learned.learned(), None);
/// for _ in 0..100 {
///     learned.record(ms(200));
/// }
/// learned.record_at(Instant::now(), ms(210)); // a caller that has read the clock already
/// // The learned value shows once the slice in which it was recorded has closed.
/// tokio::time::advance(LearnConfig::P50.window / SLICES as u32).await;
/// assert!(learned.threshold() >= ms(200) && learned.threshold() < ms(230));
/// assert_eq!(learned.learned_at(Instant::now()).map(|l| l.max(ms(50))), Some(learned.threshold_at(Instant::now())));
/// # }
/// ```
pub struct LearnedThreshold {
    static_min: Duration,
    config: LearnConfig,
    origin: Instant,
    slice_nanos: u64,
    slices: Box<[Slice; SLICES]>,
    /// The learned quantile in microseconds, `NONE` while there are too few samples.
    cached_us: AtomicU64,
    /// The slice number (plus one) `cached_us` was computed in; zero before the first time.
    cached_at: AtomicU64,
    /// Held only to clear a row when its slice of time comes round again.
    rotate: Mutex<()>,
}

const NONE: u64 = u64::MAX;

impl LearnedThreshold {
    /// A threshold that never goes below `static_min` and learns as `config` says.
    /// A window shorter than [`SLICES`] microseconds is lengthened to that.
    ///
    /// See the [example](Self#examples).
    pub fn new(static_min: Duration, config: LearnConfig) -> Self {
        let slice_nanos =
            (config.window.as_nanos() / SLICES as u128).clamp(1_000, u64::MAX as u128) as u64;
        Self {
            static_min,
            config,
            origin: Instant::now(),
            slice_nanos,
            slices: Box::new([const { Slice::new() }; SLICES]),
            cached_us: AtomicU64::new(NONE),
            cached_at: AtomicU64::new(0),
            rotate: Mutex::new(()),
        }
    }

    /// The static threshold (the route's `min_budget_ms`).
    ///
    /// See the [example](Self#examples).
    pub fn static_min(&self) -> Duration {
        self.static_min
    }

    /// How this threshold learns.
    ///
    /// See the [example](Self#examples).
    pub fn config(&self) -> &LearnConfig {
        &self.config
    }

    /// Record one completed request's own latency (its handler time, not its queueing).
    ///
    /// See the [example](Self#examples).
    #[inline]
    pub fn record(&self, latency: Duration) {
        self.record_at(Instant::now(), latency);
    }

    /// Record a latency observed at `now` (for callers that have read the clock already).
    ///
    /// See the [example](Self#examples).
    pub fn record_at(&self, now: Instant, latency: Duration) {
        let n = self.slice_no(now);
        let row = &self.slices[(n % SLICES as u64) as usize];
        let epoch = row.epoch.load(Ordering::Acquire);
        if epoch != n + 1 && !self.open_row(row, n) {
            return;
        }
        row.counts[bucket(latency)].fetch_add(1, Ordering::Relaxed);
    }

    /// Clear `row` for slice `n`; false if the row already holds a later slice (the caller's
    /// `now` is older than another thread's, and its sample belongs to a slice already gone).
    #[cold]
    fn open_row(&self, row: &Slice, n: u64) -> bool {
        let _guard = self.rotate.lock().unwrap_or_else(|p| p.into_inner());
        let epoch = row.epoch.load(Ordering::Acquire);
        if epoch == n + 1 {
            return true;
        }
        if epoch > n + 1 {
            return false;
        }
        for c in &row.counts {
            c.store(0, Ordering::Relaxed);
        }
        row.epoch.store(n + 1, Ordering::Release);
        true
    }

    /// The threshold now: `max(static, learned)`, or the static value on a cold start.
    ///
    /// See the [example](Self#examples).
    #[inline]
    pub fn threshold(&self) -> Duration {
        self.threshold_at(Instant::now())
    }

    /// The threshold as of `now`.
    ///
    /// See the [example](Self#examples).
    pub fn threshold_at(&self, now: Instant) -> Duration {
        match self.learned_at(now) {
            Some(learned) => learned.max(self.static_min),
            None => self.static_min,
        }
    }

    /// The learned quantile alone, `None` while the window holds fewer than `min_samples`.
    ///
    /// See the [example](Self#examples).
    pub fn learned(&self) -> Option<Duration> {
        self.learned_at(Instant::now())
    }

    /// The learned quantile as of `now`.
    ///
    /// See the [example](Self#examples).
    pub fn learned_at(&self, now: Instant) -> Option<Duration> {
        let n = self.slice_no(now);
        let us = if self.cached_at.load(Ordering::Acquire) == n + 1 {
            self.cached_us.load(Ordering::Relaxed)
        } else {
            // Two threads may both recompute at a slice boundary; they get the same answer.
            let us = self.compute(n);
            self.cached_us.store(us, Ordering::Relaxed);
            self.cached_at.store(n + 1, Ordering::Release);
            us
        };
        (us != NONE).then(|| Duration::from_micros(us))
    }

    /// The quantile over the rows of slices `n - SLICES + 1 ..= n`, as a bucket's upper edge
    /// (so the threshold errs towards refusing, by at most one bucket).
    fn compute(&self, n: u64) -> u64 {
        let live = |row: &Slice| {
            let epoch = row.epoch.load(Ordering::Acquire);
            epoch != 0 && epoch <= n + 1 && epoch + SLICES as u64 > n + 1
        };
        let rows: Vec<&Slice> = self.slices.iter().filter(|r| live(r)).collect();
        let at = |b: usize| -> u64 {
            rows.iter()
                .map(|r| u64::from(r.counts[b].load(Ordering::Relaxed)))
                .sum()
        };
        let total: u64 = (0..BUCKETS).map(at).sum();
        if total == 0 || total < u64::from(self.config.min_samples) {
            return NONE;
        }
        let rank = ((self.config.quantile * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for b in 0..BUCKETS {
            seen += at(b);
            if seen >= rank {
                return upper_us(b);
            }
        }
        upper_us(BUCKETS - 1)
    }

    fn slice_no(&self, now: Instant) -> u64 {
        // u64 nanoseconds last 584 years, and a u64 division is several times cheaper than
        // a u128 one on the hot path.
        let since = now.saturating_duration_since(self.origin);
        let nanos = u64::try_from(since.as_nanos()).unwrap_or(u64::MAX);
        nanos / self.slice_nanos
    }
}

impl fmt::Debug for LearnedThreshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LearnedThreshold")
            .field("static_min", &self.static_min)
            .field("config", &self.config)
            .field("learned", &self.learned())
            .finish_non_exhaustive()
    }
}

/// Two thresholds are equal only when they are the same one: each learns on its own.
impl PartialEq for LearnedThreshold {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for LearnedThreshold {}

fn bucket(latency: Duration) -> usize {
    let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
    if us < EXACT {
        return us as usize;
    }
    let exp = (63 - us.leading_zeros()).min(MAX_EXP);
    let us = us.min((1 << (MAX_EXP + 1)) - 1);
    let sub = (us >> (exp - SUB_BITS)) & ((1 << SUB_BITS) - 1);
    EXACT as usize + (((exp - FIRST_EXP) as usize) << SUB_BITS) + sub as usize
}

/// The exclusive upper edge of bucket `b`, in microseconds.
fn upper_us(b: usize) -> u64 {
    if b < EXACT as usize {
        return b as u64 + 1;
    }
    let i = b - EXACT as usize;
    let exp = FIRST_EXP + (i >> SUB_BITS) as u32;
    let sub = (i & ((1 << SUB_BITS) - 1)) as u64;
    let width = 1u64 << (exp - SUB_BITS);
    ((1 << SUB_BITS) + sub) * width + width
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn config() -> LearnConfig {
        LearnConfig {
            quantile: 0.5,
            window: Duration::from_secs(8),
            min_samples: 10,
        }
    }

    #[test]
    fn buckets_cover_every_value_and_are_at_most_an_eighth_wide() {
        assert_eq!(bucket(Duration::ZERO), 0);
        assert_eq!(bucket(Duration::MAX), BUCKETS - 1);
        let mut last = 0;
        for us in (0..5_000_000u64).step_by(7).chain([1 << 35, (1 << 36) - 1]) {
            let b = bucket(Duration::from_micros(us));
            assert!(b >= last, "monotonic at {us}");
            last = b;
            let upper = upper_us(b);
            assert!(upper > us, "{us} us in bucket {b} with upper edge {upper}");
            assert!(
                upper - us <= us / 8 + 1,
                "{us} us: upper edge {upper} is too far"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn cold_start_uses_the_static_value() {
        let t = LearnedThreshold::new(ms(40), config());
        assert_eq!(t.threshold(), ms(40));
        for _ in 0..9 {
            t.record(ms(300));
        }
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(t.learned(), None, "nine samples are below min_samples");
        assert_eq!(t.threshold(), ms(40));
    }

    #[tokio::test(start_paused = true)]
    async fn the_static_value_is_a_floor() {
        let t = LearnedThreshold::new(ms(40), config());
        for _ in 0..50 {
            t.record(ms(3));
        }
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(t.learned().unwrap() < ms(4));
        assert_eq!(t.threshold(), ms(40));
    }

    /// Record `n` latencies of `each` per slice for `slices` slices of one second.
    async fn traffic(t: &LearnedThreshold, each: Duration, n: usize, slices: usize) {
        for _ in 0..slices {
            for _ in 0..n {
                t.record(each);
            }
            tokio::time::advance(Duration::from_secs(1)).await;
        }
    }

    fn near(d: Duration, want: Duration) -> bool {
        d >= want && d <= want + want / 8
    }

    #[tokio::test(start_paused = true)]
    async fn follows_a_latency_shift_up_and_back_down() {
        let t = LearnedThreshold::new(ms(10), config());
        traffic(&t, ms(20), 30, 8).await;
        assert!(near(t.threshold(), ms(20)), "{:?}", t.threshold());

        // The service slows down: 200 ms per request. After half the window p50 moves.
        traffic(&t, ms(200), 30, 3).await;
        assert!(near(t.threshold(), ms(20)), "{:?}", t.threshold());
        traffic(&t, ms(200), 30, 2).await;
        assert!(near(t.threshold(), ms(200)), "{:?}", t.threshold());
        traffic(&t, ms(200), 30, 4).await;
        assert!(near(t.threshold(), ms(200)), "{:?}", t.threshold());

        // It recovers: the learned value comes back down once fast samples dominate.
        traffic(&t, ms(30), 30, 5).await;
        assert!(near(t.threshold(), ms(30)), "{:?}", t.threshold());
    }

    #[tokio::test(start_paused = true)]
    async fn the_quantile_is_configurable() {
        let strict = LearnedThreshold::new(
            ms(1),
            LearnConfig {
                quantile: 0.99,
                ..config()
            },
        );
        let p50 = LearnedThreshold::new(ms(1), config());
        for t in [&strict, &p50] {
            for i in 0..1_000u64 {
                t.record(ms(if i % 50 == 0 { 500 } else { 10 })); // 2% slow
            }
        }
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(near(p50.threshold(), ms(10)), "{:?}", p50.threshold());
        // p99 of a 2%-slow mix is the slow path.
        assert!(
            near(strict.threshold(), ms(500)),
            "{:?}",
            strict.threshold()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_window_forgets_and_starts_cold_again() {
        let t = LearnedThreshold::new(ms(10), config());
        traffic(&t, ms(300), 30, 2).await;
        assert!(near(t.threshold(), ms(300)));
        // Nothing ran for a whole window (every arrival refused, or no traffic).
        tokio::time::advance(Duration::from_secs(9)).await;
        assert_eq!(t.learned(), None);
        assert_eq!(t.threshold(), ms(10));
    }

    #[tokio::test(start_paused = true)]
    async fn a_sample_from_a_slice_already_reused_is_dropped() {
        let t = LearnedThreshold::new(ms(10), config());
        let old = Instant::now();
        tokio::time::advance(Duration::from_secs(8)).await;
        for _ in 0..20 {
            t.record(ms(50));
        }
        t.record_at(old, ms(900)); // same row, eight slices earlier
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(near(t.threshold(), ms(50)), "{:?}", t.threshold());
    }
}
