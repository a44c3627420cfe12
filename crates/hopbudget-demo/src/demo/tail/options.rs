//! What one run of the tail experiment is ([`TailOptions`]) and its seeded arrivals, which
//! every run (the hedged ones, the pairs, the replicas) shares.

use std::time::Duration;

use super::callee::{self, Tail};

/// What one run of the tail experiment is.
#[derive(Clone, Debug)]
pub struct TailOptions {
    /// Calls per second (Poisson, seeded).
    pub rate_per_s: f64,
    /// Seconds of calls.
    pub duration: Duration,
    /// The budget of every call.
    pub budget: Duration,
    /// The callee's latencies.
    pub tail: Tail,
}

impl Default for TailOptions {
    fn default() -> Self {
        Self {
            rate_per_s: 500.0,
            duration: Duration::from_secs(20),
            budget: Duration::from_millis(500),
            tail: Tail::default(),
        }
    }
}

/// The seeded arrival times of every run.
pub(super) fn schedule(opts: &TailOptions) -> Vec<Duration> {
    crate::demo::runner::schedule(callee::SEED, opts.rate_per_s, opts.duration)
}
