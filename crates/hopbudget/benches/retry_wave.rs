//! No retry waves (issue #38, item 4): a callee at 3x overload, its clients retrying with
//! `DeadlineRetry`, with no throttle, with an `AdaptiveThrottle` on the retries only, and with
//! one on every call (`ThrottleLayer` below the retry), on tokio's paused clock.
//!
//! The callee has 4 slots and takes 20 ms a call (200 calls/s) and refuses at once, stating
//! its 20 ms requirement, when every slot is busy. Calls arrive as a Poisson process at 600/s
//! (3x) for 10 s, each under a 500 ms budget, with up to 2 retries sent at once (the budget
//! always covers the refuser's requirement, so C6 allows them). Amplification is attempts sent
//! per call the user made. The same seeded arrivals in every run, and the same figures on any
//! machine.
//!
//! ```text
//! cargo bench -p hopbudget --bench retry_wave
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hopbudget::retry::{BudgetErrors, DeadlineRetry};
use hopbudget::throttle::{AdaptiveThrottle, ThrottleLayer};
use hopbudget::{BudgetError, HopPolicy, Refused, RequestBudget};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tower::{ServiceBuilder, ServiceExt};

const RATE: f64 = 600.0;
const SECONDS: f64 = 10.0;
const SEED: u64 = 38;

fn uniform(mut z: u64) -> f64 {
    // splitmix64
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
}

#[derive(Default)]
struct Counts {
    sent: AtomicU64,
    accepted: AtomicU64,
}

/// Where the throttle counts and rejects: nowhere, in the retry policy (retries only), or in a
/// `ThrottleLayer` below the retry (every attempt, the user's first ones included).
enum Throttling {
    None,
    Retries(Arc<AdaptiveThrottle>),
    EveryCall(Arc<AdaptiveThrottle>),
}

async fn run(throttling: Throttling) -> (u64, u64, u64, u64) {
    let slots = Arc::new(Semaphore::new(4));
    let counts = Arc::new(Counts::default());
    let seen = counts.clone();
    let callee = tower::service_fn(move |_: u64| {
        seen.sent.fetch_add(1, Ordering::Relaxed);
        let permit = slots.clone().try_acquire_owned();
        let seen = seen.clone();
        async move {
            let Ok(_permit) = permit else {
                let refused = Refused::new(Duration::from_millis(20), Duration::ZERO);
                return Err::<(), tower::BoxError>(Box::new(BudgetError::from(refused)));
            };
            seen.accepted.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok(())
        }
    });
    let policy = DeadlineRetry::new(BudgetErrors, 2);
    let (policy, layer) = match throttling {
        Throttling::None => (policy, None),
        Throttling::Retries(t) => (policy.with_throttle(t), None),
        Throttling::EveryCall(t) => (policy, Some(ThrottleLayer::new(t))),
    };
    let svc = ServiceBuilder::new()
        .retry(policy)
        .option_layer(layer)
        .service(callee);
    let start = Instant::now();
    let mut at = Duration::ZERO;
    let mut tasks = Vec::new();
    let mut call = 0u64;
    while at.as_secs_f64() < SECONDS {
        at += Duration::from_secs_f64(-(1.0 - uniform(SEED ^ call)).ln() / RATE);
        tokio::time::sleep_until(start + at).await;
        let svc = svc.clone();
        // Local tasks: tower's retry future is not provably `Send` for every lifetime of its
        // boxed error (a rustc limitation), and one thread is all the paused clock needs.
        tasks.push(tokio::task::spawn_local(async move {
            let budget = RequestBudget::local(Duration::from_millis(500), HopPolicy::DEFAULT);
            budget.scope(svc.oneshot(call)).await.is_ok()
        }));
        call += 1;
    }
    let mut answered = 0;
    for t in tasks {
        answered += u64::from(t.await.unwrap());
    }
    (
        call,
        counts.sent.load(Ordering::Relaxed),
        counts.accepted.load(Ordering::Relaxed),
        answered,
    )
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(tokio::task::LocalSet::new().run_until(async {
        let k15 = || Arc::new(AdaptiveThrottle::with(1.5, Duration::from_secs(120)));
        let runs = [
            ("no throttle", Throttling::None),
            (
                "retries, K = 2",
                Throttling::Retries(Arc::new(AdaptiveThrottle::new())),
            ),
            ("retries, K = 1.5", Throttling::Retries(k15())),
            (
                "every call, K = 2",
                Throttling::EveryCall(Arc::new(AdaptiveThrottle::new())),
            ),
            ("every call, K = 1.5", Throttling::EveryCall(k15())),
        ];
        for (name, throttling) in runs {
            let (calls, sent, accepted, answered) = run(throttling).await;
            println!(
                "{name:<20} calls {calls}  sent {sent}  accepted {accepted}  answered {answered}  amplification {:.2}  sent/accepted {:.2}",
                sent as f64 / calls as f64,
                sent as f64 / accepted as f64,
            );
        }
    }));
}
