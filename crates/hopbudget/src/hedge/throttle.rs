//! The token bucket that caps what hedging adds to the callee's load (gRPC A6's throttling:
//! tokens and a ratio).

use std::sync::atomic::{AtomicU64, Ordering};

/// Thousandths of a token: the bucket is one atomic, and a ratio such as 0.05 stays exact.
const MILLI: f64 = 1000.0;

/// A token bucket shared by every call through one [`HedgeLayer`](super::HedgeLayer): each
/// call earns `ratio` tokens (up to `max_tokens`), each hedge spends one, and a hedge that
/// finds less than one token is not sent.
///
/// Over time hedges stay below `ratio` times the calls, plus a burst of `max_tokens`: with
/// `ratio = 0.05` a callee sees at most about 5% more requests, however slow it gets. (gRPC's
/// A6 counts failures instead; here the extra *load* is what is capped, which is what hurts a
/// slow callee.) A throttled hedge is simply not sent: the call keeps waiting for the attempts
/// already in flight, never for a token.
///
/// # Examples
///
/// ```
/// use hopbudget::hedge::HedgeThrottle;
///
/// let bucket = HedgeThrottle::new(2, 0.5); // starts full: 2 tokens
/// assert!(bucket.try_hedge() && bucket.try_hedge());
/// assert!(!bucket.try_hedge(), "empty: no hedge");
/// bucket.earn(); // a call earns half a token
/// assert!(!bucket.try_hedge());
/// bucket.earn();
/// assert!(bucket.try_hedge());
/// assert_eq!(bucket.tokens(), 0.0);
/// ```
#[derive(Debug)]
pub struct HedgeThrottle {
    tokens: AtomicU64,
    max: u64,
    earn: u64,
}

impl HedgeThrottle {
    /// A full bucket of `max_tokens`; each call earns `ratio` of a token (clamped to `0..=1`).
    ///
    /// See the [example](Self#examples).
    pub fn new(max_tokens: u32, ratio: f64) -> Self {
        let max = u64::from(max_tokens) * MILLI as u64;
        // Saturating float-to-int cast: NaN and negatives earn nothing.
        let earn = (ratio.clamp(0.0, 1.0) * MILLI).round() as u64;
        Self {
            tokens: AtomicU64::new(max),
            max,
            earn,
        }
    }

    /// Credit one call.
    ///
    /// See the [example](Self#examples).
    pub fn earn(&self) {
        let _ = self
            .tokens
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some((t + self.earn).min(self.max))
            });
    }

    /// Spend one token for a hedge; `false` (and nothing spent) when less than one is left.
    ///
    /// See the [example](Self#examples).
    pub fn try_hedge(&self) -> bool {
        self.tokens
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                t.checked_sub(MILLI as u64)
            })
            .is_ok()
    }

    /// Tokens in the bucket now.
    ///
    /// See the [example](Self#examples).
    pub fn tokens(&self) -> f64 {
        self.tokens.load(Ordering::Relaxed) as f64 / MILLI
    }
}
