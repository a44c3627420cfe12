//! The layer and the service: what a hedged call may do, decided once per layer.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use tower::BoxError;
use tower::Layer;
use tower::Service;

use super::HedgeThrottle;
use super::race::race;
use super::settings::{Counters, Settings};
use crate::budget::RequestBudget;
use crate::learned::LearnedThreshold;
use crate::throttle::AdaptiveThrottle;

/// The response future of [`Hedge`]: boxed, as it owns up to `max_attempts` inner futures.
///
/// See the [module example](super#examples).
pub type ResponseFuture<R> = Pin<Box<dyn Future<Output = Result<R, BoxError>> + Send>>;

/// What one [`HedgeLayer`] has done so far, summed over every service it made.
///
/// See the [module example](super#examples).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HedgeStats {
    /// Calls made through the layer (each counts once, however many attempts it sent).
    pub calls: u64,
    /// Extra attempts sent: the load hedging added.
    pub hedges: u64,
    /// Hedges that were due and fitted the budget but were not sent: the token bucket was
    /// empty, or the adaptive throttle rejected them.
    pub throttled: u64,
    /// Calls answered by a hedge rather than by their first attempt.
    pub hedge_wins: u64,
}

/// Hedged calls inside the request's budget: after a delay with no answer, one more attempt,
/// only when the budget still covers it and the token bucket allows it; the first answer wins
/// and the others are cancelled.
///
/// Built with the hedge delay, the most attempts a call may send (the first one included)
/// and the predicate that says which requests are idempotent: only those are hedged
/// ([`idempotent_method`](super::idempotent_method) for HTTP methods, or a match on the
/// route). The default throttle is [`HedgeThrottle::new(10, 0.05)`](HedgeThrottle::new): at
/// most about 5% more requests.
///
/// See the [module example](super#examples).
#[derive(Clone)]
pub struct HedgeLayer<P> {
    delay: Duration,
    expected: Option<Duration>,
    max_attempts: usize,
    learned: Option<Arc<LearnedThreshold>>,
    throttle: Option<Arc<HedgeThrottle>>,
    adaptive: Option<Arc<AdaptiveThrottle>>,
    idempotent: P,
    counters: Arc<Counters>,
}

impl<P> std::fmt::Debug for HedgeLayer<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HedgeLayer")
            .field("delay", &self.delay)
            .field("expected", &self.expected)
            .field("max_attempts", &self.max_attempts)
            .field("throttle", &self.throttle)
            .finish_non_exhaustive()
    }
}

impl<P> HedgeLayer<P> {
    /// Hedge after `delay`, at most `max_attempts` attempts per call (1 turns hedging off),
    /// only requests for which `idempotent` says yes.
    ///
    /// See the [module example](super#examples).
    pub fn new(delay: Duration, max_attempts: usize, idempotent: P) -> Self {
        Self {
            delay,
            expected: None,
            max_attempts: max_attempts.max(1),
            learned: None,
            throttle: Some(Arc::new(HedgeThrottle::new(10, 0.05))),
            adaptive: None,
            idempotent,
            counters: Arc::default(),
        }
    }

    /// How long a new attempt is expected to take: a hedge is sent only when the forward
    /// budget covers it. Defaults to the hedge delay (a delay at the callee's p95 is a fair
    /// guess of what one more attempt needs).
    ///
    /// See the [module example](super#examples).
    pub fn expected(mut self, latency: Duration) -> Self {
        self.expected = Some(latency);
        self
    }

    /// Learn the delay from the callee's latency: each answer's latency (measured from the
    /// start of the attempt that gave it) is recorded in `learned`, and the delay is the
    /// larger of the configured one and `learned`'s threshold (a `LearnConfig` with
    /// `quantile: 0.95` for the callee's p95).
    ///
    /// See the [module example](super#examples).
    pub fn learn(mut self, learned: Arc<LearnedThreshold>) -> Self {
        self.learned = Some(learned);
        self
    }

    /// Cap the extra load with this bucket (share one `Arc` between layers to cap them
    /// together); `None` sends every hedge that fits the budget.
    ///
    /// See the [module example](super#examples).
    pub fn throttle(mut self, throttle: Option<Arc<HedgeThrottle>>) -> Self {
        self.throttle = throttle;
        self
    }

    /// Count every attempt's outcome in `throttle` (one per callee, shared with the retry
    /// policy's) and send a hedge only when it lets one through: a callee that refuses much of
    /// its traffic gets no extra attempts. A loser, cancelled, is not counted at all.
    ///
    /// See the [module example](super#examples).
    pub fn adaptive(mut self, throttle: Arc<AdaptiveThrottle>) -> Self {
        self.adaptive = Some(throttle);
        self
    }

    /// What this layer's services have done so far.
    ///
    /// See the [module example](super#examples).
    pub fn stats(&self) -> HedgeStats {
        let c = &self.counters;
        HedgeStats {
            calls: c.calls.load(Ordering::Relaxed),
            hedges: c.hedges.load(Ordering::Relaxed),
            throttled: c.throttled.load(Ordering::Relaxed),
            hedge_wins: c.hedge_wins.load(Ordering::Relaxed),
        }
    }
}

impl<S, P: Clone> Layer<S> for HedgeLayer<P> {
    type Service = Hedge<S, P>;

    fn layer(&self, inner: S) -> Self::Service {
        Hedge {
            inner,
            settings: Arc::new(Settings {
                delay: self.delay,
                expected: self.expected,
                max_attempts: self.max_attempts,
                learned: self.learned.clone(),
                throttle: self.throttle.clone(),
                adaptive: self.adaptive.clone(),
                idempotent: self.idempotent.clone(),
                counters: self.counters.clone(),
            }),
        }
    }
}

/// The service of [`HedgeLayer`].
///
/// See the [module example](super#examples).
pub struct Hedge<S, P> {
    inner: S,
    settings: Arc<Settings<P>>,
}

impl<S: Clone, P> Clone for Hedge<S, P> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            settings: self.settings.clone(),
        }
    }
}

impl<S: std::fmt::Debug, P> std::fmt::Debug for Hedge<S, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hedge")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, P, Req> Service<Req> for Hedge<S, P>
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Into<BoxError>,
    Req: Clone + Send + 'static,
    P: Fn(&Req) -> bool + Send + Sync + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let settings = &self.settings;
        settings.counters.calls.fetch_add(1, Ordering::Relaxed);
        if let Some(t) = &settings.throttle {
            t.earn();
        }
        // The readied service makes the first attempt; a clone takes its place here.
        let clone = self.inner.clone();
        let mut ready = std::mem::replace(&mut self.inner, clone);
        // Without a budget there is no telling whether another attempt fits: no hedge, as
        // `DeadlineRetry` does not retry.
        let budget = RequestBudget::current();
        match budget {
            Some(budget) if settings.max_attempts > 1 && (settings.idempotent)(&req) => {
                Box::pin(race(budget, ready, req, settings.clone()))
            }
            _ => {
                let fut = ready.call(req);
                let settings = settings.clone();
                Box::pin(async move {
                    let result = fut.await.map_err(Into::into);
                    settings.record(&result);
                    result
                })
            }
        }
    }
}
