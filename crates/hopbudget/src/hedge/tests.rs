use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tower::{BoxError, Layer, ServiceExt};

use super::*;
use crate::{budget::HopPolicy, budget::RequestBudget, error::BudgetError, error::EndCause};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// What the callee saw of one attempt: the budget it ran under, and whether it finished.
#[derive(Clone)]
struct Seen {
    budget: Option<RequestBudget>,
    forward: Duration,
    finished: bool,
}

/// A callee whose n-th attempt takes `latencies[n]` (the last one repeats) and answers `n`.
fn callee(
    latencies: Vec<u64>,
    seen: Arc<Mutex<Vec<Seen>>>,
) -> impl tower::Service<u32, Response = usize, Error = BoxError, Future: Send> + Clone + Send + 'static
{
    tower::service_fn(move |_req: u32| {
        let mut all = seen.lock().unwrap();
        let n = all.len();
        let budget = RequestBudget::current();
        all.push(Seen {
            forward: budget
                .as_ref()
                .map_or(Duration::ZERO, RequestBudget::forward),
            budget,
            finished: false,
        });
        let wait = ms(latencies[n.min(latencies.len() - 1)]);
        let seen = seen.clone();
        async move {
            tokio::time::sleep(wait).await;
            seen.lock().unwrap()[n].finished = true;
            Ok::<_, BoxError>(n)
        }
    })
}

fn every(_: &u32) -> bool {
    true
}

fn budget(total: u64) -> RequestBudget {
    RequestBudget::local(ms(total), HopPolicy::DEFAULT)
}

/// Runs one call through `layer` over a callee with `latencies`, under a `total` ms budget.
async fn call(
    layer: &HedgeLayer<fn(&u32) -> bool>,
    latencies: Vec<u64>,
    total: u64,
) -> (Result<usize, BoxError>, Duration, Vec<Seen>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let svc = layer.layer(callee(latencies, seen.clone()));
    let start = Instant::now();
    let out = budget(total).scope(svc.oneshot(7)).await;
    let elapsed = start.elapsed();
    let seen = seen.lock().unwrap().clone();
    (out, elapsed, seen)
}

fn layer(delay: u64, max: usize) -> HedgeLayer<fn(&u32) -> bool> {
    HedgeLayer::new(ms(delay), max, every as fn(&u32) -> bool)
}

#[tokio::test(start_paused = true)]
async fn the_first_answer_wins_and_the_loser_is_cancelled_not_failed() {
    let l = layer(50, 2);
    let (out, elapsed, seen) = call(&l, vec![1_000, 20], 500).await;
    assert_eq!(out.unwrap(), 1, "the hedge answered");
    assert_eq!(elapsed, ms(70), "50 ms delay + 20 ms");
    assert_eq!(seen.len(), 2);
    let loser = &seen[0];
    assert!(!loser.finished, "the loser was dropped, not run to the end");
    assert_eq!(
        loser.budget.as_ref().unwrap().end_cause(),
        Some(EndCause::Cancelled),
        "the loser's scope was cancelled, never expired or failed"
    );
    assert_eq!(seen[1].budget.as_ref().unwrap().end_cause(), None);
    assert_eq!(
        l.stats(),
        HedgeStats {
            calls: 1,
            hedges: 1,
            throttled: 0,
            hedge_wins: 1
        }
    );
}

#[tokio::test(start_paused = true)]
async fn every_attempt_forwards_the_same_shrinking_budget() {
    let (out, _, seen) = call(&layer(50, 3), vec![1_000], 500).await;
    assert!(out.is_err());
    let [a, b, c] = &seen[..] else {
        panic!("{} attempts", seen.len())
    };
    let deadline = a.budget.as_ref().unwrap().deadline();
    for s in [b, c] {
        assert_eq!(
            s.budget.as_ref().unwrap().deadline(),
            deadline,
            "one deadline"
        );
    }
    // The client layer below would stamp `forward`: 50 ms less for each hedge, not fresh.
    assert_eq!(a.forward - b.forward, ms(50));
    assert_eq!(b.forward - c.forward, ms(50));
}

#[tokio::test(start_paused = true)]
async fn no_hedge_when_the_budget_cannot_cover_delay_and_expected_latency() {
    let l = layer(50, 2).expected(ms(80));
    // 100 ms: after a 50 ms delay, 44 ms forward cannot cover 80 ms. The slow first attempt
    // runs into the deadline alone.
    let (out, elapsed, seen) = call(&l, vec![1_000, 10], 100).await;
    assert_eq!(seen.len(), 1, "no hedge that could not fit");
    assert_eq!(
        BudgetError::find(out.unwrap_err().as_ref()),
        Some(&BudgetError::Expired)
    );
    assert_eq!(elapsed, ms(100));
    // 200 ms: 144 ms forward at 50 ms covers 80 ms: hedged.
    let (out, _, seen) = call(&l, vec![1_000, 10], 200).await;
    assert_eq!((out.unwrap(), seen.len()), (1, 2));
}

#[tokio::test(start_paused = true)]
async fn no_attempt_outlives_the_deadline() {
    let (out, elapsed, seen) = call(&layer(50, 3), vec![1_000], 300).await;
    assert_eq!(
        BudgetError::find(out.unwrap_err().as_ref()),
        Some(&BudgetError::Expired)
    );
    assert_eq!(elapsed, ms(300), "every attempt ends with the budget");
    assert_eq!(seen.len(), 3);
    assert!(seen.iter().all(|s| !s.finished));
}

#[tokio::test(start_paused = true)]
async fn at_most_max_attempts() {
    for max in [1, 2, 4] {
        let (_, _, seen) = call(&layer(50, max), vec![1_000], 500).await;
        assert_eq!(seen.len(), max);
    }
}

#[tokio::test(start_paused = true)]
async fn a_throttled_hedge_is_not_sent_and_not_waited_for() {
    // One token, none earned: the first call may hedge, the second may not.
    let bucket = Arc::new(HedgeThrottle::new(1, 0.0));
    let l = layer(50, 2).throttle(Some(bucket.clone()));
    let (out, _, seen) = call(&l, vec![120, 20], 500).await;
    assert_eq!((out.unwrap(), seen.len()), (1, 2));
    let (out, elapsed, seen) = call(&l, vec![120, 20], 500).await;
    assert_eq!(seen.len(), 1, "the bucket is empty: no hedge");
    assert_eq!(out.unwrap(), 0);
    assert_eq!(
        elapsed,
        ms(120),
        "the first attempt's answer, not the deadline"
    );
    assert_eq!(l.stats().throttled, 1);
    assert_eq!(bucket.tokens(), 0.0);
}

#[tokio::test(start_paused = true)]
async fn only_requests_marked_idempotent_are_hedged() {
    let never: fn(&u32) -> bool = |_| false;
    let l = HedgeLayer::new(ms(50), 3, never);
    let (out, _, seen) = call(&l, vec![120, 20], 500).await;
    assert_eq!((out.unwrap(), seen.len()), (0, 1));
    assert!(idempotent_method(
        &http::Request::get("/").body(()).unwrap()
    ));
    assert!(!idempotent_method(
        &http::Request::post("/").body(()).unwrap()
    ));
}

#[tokio::test(start_paused = true)]
async fn without_a_budget_nothing_is_hedged() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let svc = layer(50, 3).layer(callee(vec![120, 20], seen.clone()));
    assert_eq!(svc.oneshot(7).await.unwrap(), 0);
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_failed_attempt_leaves_the_others_running() {
    let seen = Arc::new(Mutex::new(0u32));
    let inner = tower::service_fn(move |_req: u32| {
        let n = {
            let mut s = seen.lock().unwrap();
            *s += 1;
            *s
        };
        async move {
            if n == 1 {
                tokio::time::sleep(ms(80)).await;
                Err::<u32, BoxError>("connection reset".into())
            } else {
                tokio::time::sleep(ms(100)).await;
                Ok(n)
            }
        }
    });
    let svc = layer(50, 2).layer(inner);
    let start = Instant::now();
    let out = budget(500).scope(svc.oneshot(7)).await;
    assert_eq!(
        out.unwrap(),
        2,
        "the hedge still answered after the first failed"
    );
    assert_eq!(start.elapsed(), ms(150));
}

#[tokio::test(start_paused = true)]
async fn the_delay_is_learned_from_the_callee() {
    use crate::learned::{LearnConfig, LearnedThreshold, SLICES};
    let p95 = LearnConfig {
        quantile: 0.95,
        ..LearnConfig::P50
    };
    let learned = Arc::new(LearnedThreshold::new(ms(10), p95));
    // No throttle: what keeps the 30 ms call below from hedging must be the delay alone.
    let l = layer(10, 2).learn(learned.clone()).throttle(None);
    for _ in 0..30 {
        let (out, _, _) = call(&l, vec![40], 500).await;
        out.unwrap();
    }
    tokio::time::advance(p95.window / SLICES as u32).await;
    // The callee's p95 is about 40 ms: a 30 ms answer is no longer hedged.
    let before = l.stats().hedges;
    let (out, _, seen) = call(&l, vec![30], 500).await;
    assert_eq!((out.unwrap(), seen.len()), (0, 1));
    assert_eq!(l.stats().hedges, before);
}

#[tokio::test(start_paused = true)]
async fn an_adaptive_throttle_holds_hedges_back_from_a_refusing_callee() {
    use crate::error::Refused;
    use crate::throttle::AdaptiveThrottle;
    // The first 50 calls are refused at once; the next ones are slow (a hedge would be due).
    let callee = || {
        let calls = Arc::new(Mutex::new(0u32));
        tower::service_fn(move |_req: u32| {
            let n = {
                let mut c = calls.lock().unwrap();
                *c += 1;
                *c
            };
            async move {
                if n <= 50 {
                    return Err::<u32, BoxError>(Box::new(BudgetError::from(Refused::new(
                        ms(20),
                        Duration::ZERO,
                    ))));
                }
                tokio::time::sleep(ms(200)).await;
                Ok(n)
            }
        })
    };
    for adaptive in [false, true] {
        let throttle = Arc::new(AdaptiveThrottle::new());
        let mut l = layer(50, 2).throttle(None);
        if adaptive {
            l = l.adaptive(throttle.clone());
        }
        let svc = l.layer(callee());
        for _ in 0..60 {
            let _ = budget(1_000).scope(svc.clone().oneshot(7)).await;
        }
        let stats = l.stats();
        if adaptive {
            // p starts at 50/51 and falls as the slow calls are accepted: 8 of 10 held back.
            assert_eq!((stats.hedges, stats.throttled), (2, 8), "{stats:?}");
        } else {
            assert_eq!((stats.hedges, stats.throttled), (10, 0));
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_loser_is_not_counted_by_the_adaptive_throttle() {
    use crate::throttle::AdaptiveThrottle;
    let throttle = Arc::new(AdaptiveThrottle::new());
    let l = layer(50, 2).throttle(None).adaptive(throttle.clone());
    for _ in 0..20 {
        let (out, _, seen) = call(&l, vec![1_000, 20], 500).await;
        assert_eq!((out.unwrap(), seen.len()), (1, 2));
    }
    assert_eq!(
        throttle.counts(),
        (20, 20),
        "20 winners accepted; the 20 losers counted nowhere"
    );
}

/// Two replicas behind [`HedgeBalance`]: replica 0 takes `slow` ms, replica 1 `quick`; each
/// records (replica, request) when called and answers with its number.
fn replicas(
    slow: u64,
    quick: u64,
    calls: Arc<Mutex<Vec<(usize, u32)>>>,
) -> Vec<
    impl tower::Service<u32, Response = usize, Error = BoxError, Future: Send> + Clone + Send + 'static,
> {
    [(0usize, slow), (1, quick)]
        .into_iter()
        .map(|(n, took)| {
            let calls = calls.clone();
            tower::service_fn(move |req: u32| {
                calls.lock().unwrap().push((n, req));
                async move {
                    tokio::time::sleep(ms(took)).await;
                    Ok::<_, BoxError>(n)
                }
            })
        })
        .collect()
}

/// Call 1's first attempt goes to replica 0 (slow), call 2's to replica 1, and both are still
/// in flight when call 1 hedges at 50 ms: one in flight on each replica, and the tie falls to
/// replica 0 again. Only the rule sends the hedge to replica 1.
async fn hedge_with_one_in_flight_on_each(
    balance: HedgeBalance<
        impl tower::Service<u32, Response = usize, Error = BoxError, Future: Send>
        + Clone
        + Send
        + 'static,
    >,
) -> (Result<usize, BoxError>, Duration) {
    let svc = layer(50, 2).throttle(None).layer(balance);
    let start = Instant::now();
    let second = tokio::spawn(budget(1_000).scope(svc.clone().oneshot(2)));
    let first = budget(1_000).scope(svc.oneshot(1)).await;
    let took = start.elapsed();
    let _ = second.await;
    (first, took)
}

#[tokio::test(start_paused = true)]
async fn a_hedge_never_goes_to_the_replica_its_first_attempt_waits_on() {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let balance = HedgeBalance::new(replicas(1_000, 200, calls.clone()));
    let (answer, took) = hedge_with_one_in_flight_on_each(balance).await;
    let calls = calls.lock().unwrap().clone();
    let hedges: Vec<usize> = calls.iter().filter(|c| c.1 == 1).map(|c| c.0).collect();
    assert_eq!(
        hedges,
        [0, 1],
        "call 1: first attempt on replica 0, its hedge on 1: {calls:?}"
    );
    assert_eq!(answer.unwrap(), 1);
    assert_eq!(
        took,
        ms(250),
        "hedged at 50 ms, answered by the quick replica 200 ms later"
    );
}

#[tokio::test(start_paused = true)]
async fn without_the_rule_the_same_hedge_waits_on_the_slow_replica() {
    // The control for the test above: the same calls, the balancer told to ignore hedges.
    let calls = Arc::new(Mutex::new(Vec::new()));
    let balance = HedgeBalance::new(replicas(1_000, 200, calls.clone())).ignore_hedges();
    let (answer, took) = hedge_with_one_in_flight_on_each(balance).await;
    let calls = calls.lock().unwrap().clone();
    let hedges: Vec<usize> = calls.iter().filter(|c| c.1 == 1).map(|c| c.0).collect();
    assert_eq!(hedges, [0, 0], "{calls:?}");
    assert_eq!((answer.unwrap(), took), (0, ms(1_000)));
}

#[tokio::test(start_paused = true)]
async fn with_every_replica_taken_the_fewest_in_flight_wins_and_counts_drop_to_zero() {
    // One replica: the hedge has nowhere else to go, and goes there.
    let calls = Arc::new(Mutex::new(Vec::new()));
    let one: Vec<_> = replicas(100, 100, calls.clone())
        .into_iter()
        .take(1)
        .collect();
    let balance = HedgeBalance::new(one);
    let svc = layer(50, 2).throttle(None).layer(balance.clone());
    let answer = budget(1_000).scope(svc.oneshot(1)).await;
    assert_eq!(answer.unwrap(), 0);
    assert_eq!(*calls.lock().unwrap(), [(0, 1), (0, 1)]);
    assert_eq!(
        balance.in_flight(),
        [0],
        "the loser, dropped, is counted out"
    );
}

#[tokio::test]
async fn a_balancer_with_no_replica_is_an_error_not_a_panic() {
    let none: Vec<tower::util::BoxCloneService<u32, usize, BoxError>> = Vec::new();
    let err = HedgeBalance::new(none).oneshot(1).await.unwrap_err();
    assert!(err.to_string().contains("no replica"), "{err}");
}
