//! A `tower::retry` policy that obeys rule [C6](crate::contract#c6).
//!
//! - Never after `expired` or `cancelled`: a new attempt needs a new deadline from the original
//!   client, and only the original client can give one.
//! - After `refused` only if this caller's forward budget covers what the refuser said it
//!   needs (another replica may have capacity; the same budget will not grow).
//! - Any other failure is retried only while the forward budget is above the refuse
//!   threshold, and each attempt spends the *remaining* budget: the client layer stamps every
//!   attempt from the same shrinking deadline, never a fresh one.
//!
//! See the example on [`DeadlineRetry`].
//!
//! Guide: *Budgets, carriers and retries*, `docs/guide/concepts.md` in the repository.

use std::future::{Ready, ready};
use std::sync::Arc;

use tower::retry::Policy;

use crate::budget::RequestBudget;
use crate::throttle::AdaptiveThrottle;

// The reading of a result is shared with the throttle and the hedge; its public names stay
// here, where users reach them (`hopbudget::retry::Classify`).
pub use crate::classify::{Attempt, BudgetErrors, Classify};

/// A retry policy bounded by the request's budget (rule [C6](crate::contract#c6)).
///
/// The budget is the one given to [`DeadlineRetry::with_budget`], or else the ambient one at
/// the time of the decision. Without any budget it does not retry: it cannot tell whether an
/// attempt would fit.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use hopbudget::retry::{Attempt, BudgetErrors, Classify, DeadlineRetry};
/// use hopbudget::{BudgetError, HopPolicy, Refused, RequestBudget};
///
/// let policy = DeadlineRetry::new(BudgetErrors, 2); // at most 2 retries
/// let _layer = tower::retry::RetryLayer::new(policy.clone());
///
/// // What a failed call amounted to, from the error a client layer returned.
/// let err: tower::BoxError = Box::new(BudgetError::Refused(Refused::new(
///     Duration::from_millis(200),
///     Duration::from_millis(120),
/// )));
/// let attempt = Classify::<(), _>::classify(&BudgetErrors, &Err(err));
/// assert_eq!(attempt, Attempt::Refused { required: Some(Duration::from_millis(200)) });
///
/// // 1 s left: the refuser's 200 ms fits, a retry is allowed; never after expiry (C6).
/// let policy = policy.with_budget(RequestBudget::local(Duration::from_secs(1), HopPolicy::DEFAULT));
/// assert!(policy.allows(attempt));
/// assert!(!policy.allows(Attempt::Expired));
///
/// // No retry waves: with an adaptive throttle (one per callee), retries are rejected locally
/// // as the callee refuses more of the attempts (Google SRE, K = 2).
/// let throttle = std::sync::Arc::new(hopbudget::throttle::AdaptiveThrottle::new());
/// let _policy = DeadlineRetry::new(BudgetErrors, 2).with_throttle(throttle);
/// assert_eq!(attempt.accepted(), Some(false));
/// ```
#[derive(Clone, Debug)]
pub struct DeadlineRetry<C> {
    classify: C,
    retries_left: usize,
    budget: Option<RequestBudget>,
    throttle: Option<Arc<AdaptiveThrottle>>,
}

impl<C> DeadlineRetry<C> {
    /// At most `max_retries` retries, classified by `classify`.
    ///
    /// See the [example](Self#examples).
    pub const fn new(classify: C, max_retries: usize) -> Self {
        Self {
            classify,
            retries_left: max_retries,
            budget: None,
            throttle: None,
        }
    }

    /// Decide against this budget instead of the ambient one.
    ///
    /// See the [example](Self#examples).
    pub fn with_budget(mut self, budget: RequestBudget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Count every attempt's outcome in `throttle` and send a retry only when it lets one
    /// through ([`AdaptiveThrottle::try_send`]): no retry wave at a refusing callee.
    ///
    /// See the [example](Self#examples).
    pub fn with_throttle(mut self, throttle: Arc<AdaptiveThrottle>) -> Self {
        self.throttle = Some(throttle);
        self
    }

    /// Whether another attempt is allowed after `attempt` (rule [C6](crate::contract#c6)).
    ///
    /// See the [example](Self#examples).
    pub fn allows(&self, attempt: Attempt) -> bool {
        if self.retries_left == 0 {
            return false;
        }
        let Some(budget) = self.budget.clone().or_else(RequestBudget::current) else {
            return false;
        };
        if budget.is_done() {
            return false;
        }
        let forward = budget.forward();
        let threshold = budget.policy().refuse_below;
        match attempt {
            Attempt::Done | Attempt::Expired | Attempt::Cancelled => false,
            Attempt::Refused { required } => {
                forward >= threshold && forward >= required.unwrap_or(threshold)
            }
            Attempt::Retryable => forward >= threshold,
        }
    }
}

impl<Req, Res, E, C> Policy<Req, Res, E> for DeadlineRetry<C>
where
    Req: Clone,
    C: Classify<Res, E>,
{
    type Future = Ready<()>;

    fn retry(&mut self, _req: &mut Req, result: &mut Result<Res, E>) -> Option<Self::Future> {
        let attempt = self.classify.classify(result);
        let throttle = self.throttle.as_deref();
        if let (Some(t), Some(accepted)) = (throttle, attempt.accepted()) {
            t.record(accepted);
        }
        // The budget is checked first: a retry C6 forbids is not a request the throttle saw.
        if self.allows(attempt) && throttle.is_none_or(AdaptiveThrottle::try_send) {
            self.retries_left -= 1;
            Some(ready(()))
        } else {
            None
        }
    }

    fn clone_request(&mut self, req: &Req) -> Option<Req> {
        Some(req.clone())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use tower::{BoxError, Service, ServiceBuilder, ServiceExt};

    use super::*;
    use crate::throttle::{ThrottleLayer, Throttled};
    use crate::{budget::HopPolicy, error::BudgetError, error::Refused};

    fn budget(ms: u64) -> RequestBudget {
        RequestBudget::local(Duration::from_millis(ms), HopPolicy::DEFAULT)
    }

    /// A service that fails with a fixed error every time and counts its calls.
    fn failing(
        calls: Arc<AtomicUsize>,
        error: fn() -> BoxError,
    ) -> impl Service<u32, Response = u32, Error = BoxError, Future: Send> + Clone {
        tower::service_fn(move |_req: u32| {
            calls.fetch_add(1, Ordering::SeqCst);
            let e = error();
            async move { Err::<u32, _>(e) }
        })
    }

    async fn attempts_with(b: RequestBudget, error: fn() -> BoxError) -> usize {
        let calls = Arc::new(AtomicUsize::new(0));
        let mut svc = ServiceBuilder::new()
            .retry(DeadlineRetry::new(BudgetErrors, 3).with_budget(b))
            .service(failing(calls.clone(), error));
        let _ = svc.ready().await.unwrap().call(1).await;
        calls.load(Ordering::SeqCst)
    }

    #[tokio::test(start_paused = true)]
    async fn never_retries_after_expired_or_cancelled() {
        assert_eq!(
            attempts_with(budget(1_000), || Box::new(BudgetError::Expired)).await,
            1
        );
        assert_eq!(
            attempts_with(budget(1_000), || Box::new(BudgetError::Cancelled)).await,
            1
        );
    }

    #[tokio::test(start_paused = true)]
    async fn refused_is_retried_only_when_the_requirement_fits() {
        let refused_200: fn() -> BoxError = || {
            Box::new(BudgetError::from(Refused::new(
                Duration::from_millis(200),
                Duration::ZERO,
            )))
        };
        // 1000 ms leaves 994 ms to forward: covers 200 ms, so all 3 retries are spent.
        assert_eq!(attempts_with(budget(1_000), refused_200).await, 4);
        // 150 ms leaves 144 ms: does not cover 200 ms, so no retry.
        assert_eq!(attempts_with(budget(150), refused_200).await, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn other_failures_retry_only_while_budget_remains() {
        let io: fn() -> BoxError = || "connection reset".into();
        assert_eq!(attempts_with(budget(1_000), io).await, 4);
        assert_eq!(
            attempts_with(budget(12), io).await,
            1,
            "6 ms forward < 10 ms threshold"
        );
        let ended = budget(1_000);
        ended.cancel();
        assert_eq!(attempts_with(ended, io).await, 1);
    }

    /// Attempts sent for 300 user calls to a callee at 3x overload: it accepts one attempt
    /// in three and refuses the others with a requirement any retry would cover.
    async fn amplification(throttle: Option<Arc<AdaptiveThrottle>>) -> f64 {
        let sent = Arc::new(AtomicUsize::new(0));
        let count = sent.clone();
        let callee = tower::service_fn(move |_req: u32| {
            let n = count.fetch_add(1, Ordering::SeqCst);
            async move {
                if n % 3 == 0 {
                    Ok(n as u32)
                } else {
                    Err::<u32, BoxError>(Box::new(BudgetError::from(Refused::new(
                        Duration::from_millis(20),
                        Duration::ZERO,
                    ))))
                }
            }
        });
        let mut policy = DeadlineRetry::new(BudgetErrors, 2);
        if let Some(t) = throttle {
            policy = policy.with_throttle(t);
        }
        let svc = ServiceBuilder::new().retry(policy).service(callee);
        for _ in 0..300 {
            let _ = budget(1_000).scope(svc.clone().oneshot(1)).await;
        }
        sent.load(Ordering::SeqCst) as f64 / 300.0
    }

    #[tokio::test(start_paused = true)]
    async fn an_adaptive_throttle_stops_the_retry_wave() {
        let without = amplification(None).await;
        let with = amplification(Some(Arc::new(AdaptiveThrottle::new()))).await;
        let k1 = AdaptiveThrottle::with(1.0, Duration::from_secs(120));
        let with_k1 = amplification(Some(Arc::new(k1))).await;
        eprintln!(
            "amplification at 3x: {without:.2} without, {with:.2} with K = 2, {with_k1:.2} with K = 1"
        );
        // Two retries at a callee that refuses 2 in 3: more than twice the calls are sent.
        assert!(without > 2.0, "without: {without}");
        // K = 2 lets through up to twice what the callee accepts; the first attempts are
        // never throttled (they are the user's calls), so the floor is 1.
        assert!(with < 1.6, "with: {with}");
        assert!(with_k1 < with, "K = 1: {with_k1}");
    }

    #[tokio::test(start_paused = true)]
    async fn without_any_budget_it_does_not_retry() {
        let p = DeadlineRetry::new(BudgetErrors, 3);
        assert!(!p.allows(Attempt::Retryable));
        let inside = budget(1_000)
            .scope(async move { p.allows(Attempt::Retryable) })
            .await;
        assert!(inside, "the ambient budget is used when none is given");
    }

    /// Under a retry policy, a call the throttle rejected is not sent and not retried: the
    /// throttle already said the callee is full.
    #[tokio::test(start_paused = true)]
    async fn a_throttled_call_is_not_sent_and_not_retried() {
        let throttle = Arc::new(AdaptiveThrottle::new());
        // The callee has refused everything lately: the next draw rejects.
        for _ in 0..100 {
            throttle.record(false);
        }
        let sent = Arc::new(AtomicUsize::new(0));
        let count = sent.clone();
        let callee = tower::service_fn(move |_req: u32| {
            count.fetch_add(1, Ordering::SeqCst);
            async { Ok::<(), BoxError>(()) }
        });
        let client = ServiceBuilder::new()
            .retry(DeadlineRetry::new(BudgetErrors, 2))
            .layer(ThrottleLayer::new(throttle.clone()))
            .service(callee);
        let mut results = Vec::new();
        for n in 0..10 {
            results.push(budget(500).scope(client.clone().oneshot(n)).await);
        }
        let throttled = results
            .iter()
            .filter(|r| matches!(r, Err(e) if e.is::<Throttled>()))
            .count();
        assert!(throttled >= 8, "{throttled} of 10 throttled");
        // Every call that went out was sent once: a throttled one was not retried.
        assert_eq!(sent.load(Ordering::SeqCst), 10 - throttled);
        assert_eq!(
            throttle.counts().0,
            100 + 10,
            "each call counted once, sent or rejected here"
        );
    }
}
