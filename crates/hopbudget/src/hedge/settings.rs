//! What a hedged call reads, decided once per layer and shared by the layer's services and
//! every race they run; and the counters they add to.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use tower::BoxError;

use super::HedgeThrottle;
use crate::classify::error_attempt;
use crate::learned::LearnedThreshold;
use crate::throttle::AdaptiveThrottle;

/// What the layer's services have done, summed: read as [`HedgeStats`](super::HedgeStats).
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) calls: AtomicU64,
    pub(super) hedges: AtomicU64,
    pub(super) throttled: AtomicU64,
    pub(super) hedge_wins: AtomicU64,
}

/// Everything a hedged call reads, shared by the layer and its services.
pub(super) struct Settings<P> {
    pub(super) delay: Duration,
    pub(super) expected: Option<Duration>,
    pub(super) max_attempts: usize,
    pub(super) learned: Option<Arc<LearnedThreshold>>,
    pub(super) throttle: Option<Arc<HedgeThrottle>>,
    pub(super) adaptive: Option<Arc<AdaptiveThrottle>>,
    pub(super) idempotent: P,
    pub(super) counters: Arc<Counters>,
}

impl<P> Settings<P> {
    /// The hedge delay now: the configured one, or the learned quantile when it is larger.
    pub(super) fn delay(&self) -> Duration {
        self.learned
            .as_ref()
            .map_or(self.delay, |l| l.threshold().max(self.delay))
    }

    /// Count one attempt's outcome in the adaptive throttle, if there is one.
    pub(super) fn record<R>(&self, result: &Result<R, BoxError>) {
        match result {
            Ok(_) => self.count(Some(true)),
            Err(e) => self.record_error(e),
        }
    }

    /// Count one failed attempt: a refusal or a failure was not accepted; a cancel says
    /// nothing about the callee.
    pub(super) fn record_error(&self, e: &BoxError) {
        self.count(error_attempt(e).accepted());
    }

    fn count(&self, accepted: Option<bool>) {
        if let (Some(t), Some(accepted)) = (&self.adaptive, accepted) {
            t.record(accepted);
        }
    }
}
