//! The client's retries in the retry wave (`demo --retry-wave`): how it retries its calls to
//! the edge ([`Retrying`]) and the retrying client itself ([`ClientRetries`]), which the
//! runner drives on every call. Apart from the wave's runs and table (`retry_wave.rs`), so
//! that the runner and the wave both build on it and neither on the other.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hopbudget::retry::{BudgetErrors, DeadlineRetry};
use hopbudget::throttle::AdaptiveThrottle;
use hopbudget::{BudgetError, HopPolicy, RequestBudget};
use serde::{Deserialize, Serialize};
use tower::retry::Policy;

use super::hop_error::HopError;

/// Retries after the first attempt, at most (the bench's).
pub const MAX_RETRIES: usize = 2;

/// How the client retries its calls to the edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Retrying {
    /// One attempt per call.
    Off,
    /// `DeadlineRetry` with no throttle.
    Unthrottled,
    /// `DeadlineRetry::with_throttle(AdaptiveThrottle::new())` (K = 2), one throttle for the
    /// edge, shared by every call.
    Throttled,
}

impl Retrying {
    /// Every way, in the order the table shows them.
    pub const ALL: [Retrying; 3] = [Retrying::Off, Retrying::Unthrottled, Retrying::Throttled];

    /// How the table names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Retrying::Off => "no retries",
            Retrying::Unthrottled => "retries, no throttle",
            Retrying::Throttled => "retries, throttled (K = 2)",
        }
    }
}

/// The client's retries for one run: the policy every call starts from, and the attempts
/// sent, counted as they go out.
#[derive(Clone, Debug)]
pub struct ClientRetries {
    max_retries: usize,
    throttle: Option<Arc<AdaptiveThrottle>>,
    attempts: Arc<AtomicU64>,
}

impl ClientRetries {
    /// The client's retries for `retrying`, with a fresh throttle if it has one.
    pub fn new(retrying: Retrying) -> Self {
        let (max_retries, throttle) = match retrying {
            Retrying::Off => (0, None),
            Retrying::Unthrottled => (MAX_RETRIES, None),
            Retrying::Throttled => (MAX_RETRIES, Some(Arc::new(AdaptiveThrottle::new()))),
        };
        Self {
            max_retries,
            throttle,
            attempts: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Attempts sent so far.
    pub fn attempts(&self) -> u64 {
        self.attempts.load(Ordering::Relaxed)
    }

    /// One call under `budget`: `attempt` is sent, and sent again while the library's policy
    /// allows it (C6, and the throttle if there is one). Each attempt gets what is left of the
    /// one budget to forward (when `forwards`), never a fresh one.
    pub async fn call<F, Fut>(
        &self,
        budget: Duration,
        forwards: bool,
        mut attempt: F,
    ) -> Result<u32, HopError>
    where
        F: FnMut(Option<Duration>) -> Fut,
        Fut: Future<Output = Result<u32, HopError>>,
    {
        let budget = RequestBudget::local(budget, HopPolicy::DEFAULT);
        let mut policy =
            DeadlineRetry::new(BudgetErrors, self.max_retries).with_budget(budget.clone());
        if let Some(t) = &self.throttle {
            policy = policy.with_throttle(t.clone());
        }
        loop {
            self.attempts.fetch_add(1, Ordering::Relaxed);
            let forward = forwards.then(|| budget.forward());
            let mut result: Result<u32, tower::BoxError> = attempt(forward).await.map_err(boxed);
            // The policy is driven by hand rather than through `tower::retry::Retry`, whose
            // future is not provably `Send` for a boxed error; the decisions are the same.
            match Policy::<(), u32, tower::BoxError>::retry(&mut policy, &mut (), &mut result) {
                Some(wait) => wait.await,
                None => return result.map_err(unboxed),
            }
        }
    }
}

/// A hop error as the policy reads errors: a budget error as itself, anything else as a
/// failure a retry may fix.
fn boxed(e: HopError) -> tower::BoxError {
    match e {
        HopError::Budget(b) => Box::new(b),
        other => format!("{other:?}").into(),
    }
}

fn unboxed(e: tower::BoxError) -> HopError {
    match BudgetError::find(e.as_ref()) {
        Some(b) => HopError::Budget(*b),
        None => HopError::Failed(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hopbudget::Refused;

    fn refused() -> HopError {
        HopError::Budget(BudgetError::from(Refused::new(
            Duration::from_millis(20),
            Duration::ZERO,
        )))
    }

    #[tokio::test(start_paused = true)]
    async fn retries_stop_at_the_limit_and_without_retries_one_attempt_goes() {
        for (retrying, expected) in [(Retrying::Off, 1), (Retrying::Unthrottled, 3)] {
            let r = ClientRetries::new(retrying);
            let got = r
                .call(Duration::from_millis(500), true, |_| async {
                    Err(refused())
                })
                .await;
            assert_eq!(got, Err(refused()));
            assert_eq!(r.attempts(), expected, "{retrying:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn each_attempt_forwards_what_is_left_of_one_budget() {
        let r = ClientRetries::new(Retrying::Unthrottled);
        let mut seen = Vec::new();
        let _ = r
            .call(Duration::from_millis(500), true, |f| {
                seen.push(f);
                async {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Err(refused())
                }
            })
            .await;
        let seen: Vec<Duration> = seen.into_iter().map(Option::unwrap).collect();
        assert_eq!(seen.len(), 3);
        assert!(seen[0] <= Duration::from_millis(500));
        assert!(seen[1] <= seen[0] - Duration::from_millis(100), "{seen:?}");
        assert!(seen[2] <= seen[1] - Duration::from_millis(100), "{seen:?}");
    }
}
