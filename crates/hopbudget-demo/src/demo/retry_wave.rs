//! The retry wave over real sockets (`demo --retry-wave`, issue #48 item 4): the checkout
//! graph at 3x its capacity in propagated mode, the client retrying its calls to the edge
//! with the library's [`DeadlineRetry`], without and with its [`AdaptiveThrottle`], beside a
//! client that does not retry; and how many attempts each sent per call it made and per
//! call answered.
//!
//! The retries sit where the paused-clock bench (`benches/retry_wave.rs` in `hopbudget`)
//! puts them: on the calls a user makes to the callee (here the edge, and the whole graph
//! behind it), up to 2 retries sent at once, under the client's budget (500 ms in the
//! checkout graph, as in the bench), with the throttle on the retries only.

use std::fmt::Write as _;
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
use super::mode::Mode;
use super::{DemoOptions, runner};

/// The overload, as a multiple of the graph's capacity (the bench's).
pub const LOAD_FACTOR: f64 = 3.0;

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

/// One way of retrying through the wave.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WaveRun {
    /// How the client retried.
    pub retrying: Retrying,
    /// Calls the user made.
    pub calls: u64,
    /// Attempts the client sent.
    pub attempts: u64,
    /// Calls answered within the budget.
    pub answered: u64,
}

impl WaveRun {
    /// Attempts sent per call the user made.
    pub fn amplification(&self) -> f64 {
        self.attempts as f64 / self.calls.max(1) as f64
    }

    /// Attempts sent per call answered.
    pub fn per_answered(&self) -> f64 {
        self.attempts as f64 / self.answered.max(1) as f64
    }
}

/// The checkout graph of `opts` at [`LOAD_FACTOR`] times its capacity for `duration`, in
/// propagated mode, once per way of retrying in `ways`, over the same seeded arrivals.
pub fn run(
    opts: &DemoOptions,
    duration: Duration,
    ways: &[Retrying],
) -> Result<Vec<WaveRun>, String> {
    let topo = &opts.topology;
    let rate = topo.capacity_per_s() * LOAD_FACTOR;
    let mut out = Vec::new();
    for &retrying in ways {
        let retries = ClientRetries::new(retrying);
        let spec = runner::RunSpec {
            mode: Mode::Propagated,
            rate_per_s: rate,
            duration,
            forgetful: None,
            drain_limit: Duration::from_secs(2),
            progress: opts.progress,
            label: format!("retry wave, {}", retrying.as_str()),
            broker: opts.broker.clone(),
            arrivals: None,
            retries: Some(retries.clone()),
        };
        let data = runner::run(topo, &spec)?;
        let answered = data.collector.clients().values().filter(|c| c.ok).count();
        out.push(WaveRun {
            retrying,
            calls: data.sent as u64,
            attempts: retries.attempts(),
            answered: answered as u64,
        });
    }
    Ok(out)
}

/// The runs as a text table with its caption.
pub fn text(runs: &[WaveRun], opts: &DemoOptions, duration: Duration) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Retry wave: the graph at {LOAD_FACTOR}x capacity ({:.0} calls/s) for {:.0} s, \
         propagated mode, up to {MAX_RETRIES} retries of the client's calls to the edge\n",
        opts.topology.capacity_per_s() * LOAD_FACTOR,
        duration.as_secs_f64()
    );
    let _ = writeln!(
        s,
        "{:<28} {:>7} {:>9} {:>9} {:>14} {:>16}",
        "client", "calls", "attempts", "answered", "amplification", "sent / answered"
    );
    for r in runs {
        let _ = writeln!(
            s,
            "{:<28} {:>7} {:>9} {:>9} {:>14.2} {:>16.2}",
            r.retrying.as_str(),
            r.calls,
            r.attempts,
            r.answered,
            r.amplification(),
            r.per_answered()
        );
    }
    s
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
