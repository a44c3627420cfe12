//! Time-driven admission behaviour on tokio's paused clock: exact instants, no sleeps used
//! as assertions about speed.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

use super::*;
use crate::{budget::HopPolicy, error::BudgetError};

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn budget(v: u64) -> RequestBudget {
    RequestBudget::local(ms(v), HopPolicy::DEFAULT)
}

/// Let every spawned task run until it blocks.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

type Log = Arc<Mutex<Vec<&'static str>>>;

/// A task that waits for a permit under a `budget_ms` budget, logs `name` when granted and
/// holds the permit for `hold`.
fn waiter(
    sem: &BudgetSemaphore,
    log: &Log,
    name: &'static str,
    budget_ms: u64,
    cost: Duration,
    hold: Duration,
) -> tokio::task::JoinHandle<Result<Instant, BudgetError>> {
    let (sem, log, b) = (sem.clone(), log.clone(), budget(budget_ms));
    tokio::spawn(b.clone().scope(async move {
        let permit = sem.acquire(cost).await?;
        log.lock().unwrap().push(name);
        tokio::time::sleep(hold).await;
        drop(permit);
        Ok(Instant::now())
    }))
}

#[tokio::test(start_paused = true)]
async fn waiters_are_served_earliest_deadline_first_ties_in_arrival_order() {
    let sem = BudgetSemaphore::new(1);
    let log = Log::default();
    let held = sem.acquire(ms(0)).await.unwrap();
    let tasks = [
        waiter(&sem, &log, "300a", 300, ms(5), ms(1)),
        waiter(&sem, &log, "100", 100, ms(5), ms(1)),
        waiter(&sem, &log, "300b", 300, ms(5), ms(1)),
        waiter(&sem, &log, "200", 200, ms(5), ms(1)),
    ];
    settle().await;
    assert_eq!(sem.waiting(), 4);
    drop(held);
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert_eq!(*log.lock().unwrap(), ["100", "200", "300a", "300b"]);
    assert_eq!(sem.available_permits(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_is_dropped_at_the_exact_instant_its_budget_reaches_its_cost() {
    let sem = BudgetSemaphore::new(1);
    let held = sem.acquire(ms(0)).await.unwrap();
    let start = Instant::now();
    let b = budget(100);
    let task = tokio::spawn({
        let sem = sem.clone();
        b.clone()
            .scope(async move { (sem.acquire(ms(30)).await.map(drop), Instant::now()) })
    });
    tokio::time::sleep(ms(69)).await;
    settle().await;
    assert_eq!(
        sem.waiting(),
        1,
        "still waiting 1 ms before deadline - cost"
    );
    let (result, at) = task.await.unwrap();
    assert_eq!(
        at - start,
        ms(70),
        "refused at deadline - cost, not a tick later"
    );
    match result {
        Err(BudgetError::Refused(r)) => {
            assert_eq!(r.required(), ms(30));
            assert_eq!(r.remaining(), ms(30));
        }
        other => panic!("{other:?}"),
    }
    // It never took the slot: the holder still has it, and nobody waits.
    assert_eq!(sem.waiting(), 0);
    assert_eq!(sem.available_permits(), 0);
    drop(held);
    assert_eq!(sem.available_permits(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_slot_freed_at_a_waiters_refusal_instant_is_not_given_to_it() {
    let sem = BudgetSemaphore::new(1);
    let log = Log::default();
    // The holder releases at exactly 70 ms, the instant the waiter's 30 ms cost meets its
    // remaining budget: starting then would end at the deadline, so it must not start.
    let holder = waiter(&sem, &log, "holder", 1_000, ms(0), ms(70));
    settle().await;
    let late = waiter(&sem, &log, "late", 100, ms(30), ms(1));
    assert!(matches!(late.await.unwrap(), Err(BudgetError::Refused(_))));
    holder.await.unwrap().unwrap();
    assert_eq!(*log.lock().unwrap(), ["holder"]);
    assert_eq!(sem.available_permits(), 1);
}

#[tokio::test(start_paused = true)]
async fn arrival_with_too_little_budget_is_refused_even_with_a_free_slot() {
    let sem = BudgetSemaphore::new(1);
    let b = budget(20);
    match sem.acquire_with(&b, ms(20)).await {
        Err(BudgetError::Refused(r)) => assert_eq!((r.required(), r.remaining()), (ms(20), ms(20))),
        other => panic!("{other:?}"),
    }
    assert!(sem.acquire_with(&b, ms(19)).await.is_ok());
    tokio::time::advance(ms(20)).await;
    assert!(matches!(
        sem.acquire_with(&b, ms(0)).await,
        Err(BudgetError::Expired)
    ));
    assert_eq!(sem.available_permits(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_waiter_leaves_at_once_and_leaks_no_slot() {
    let sem = BudgetSemaphore::new(2);
    let a = sem.acquire(ms(0)).await.unwrap();
    let b = sem.acquire(ms(0)).await.unwrap();
    let waiting = tokio::spawn({
        let sem = sem.clone();
        budget(1_000).scope(async move { sem.acquire(ms(10)).await.map(drop) })
    });
    settle().await;
    assert_eq!(sem.waiting(), 1);
    waiting.abort();
    settle().await;
    assert_eq!(sem.waiting(), 0, "the aborted waiter left the queue");
    drop(a);
    drop(b);
    assert_eq!(sem.available_permits(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_dropped_after_being_granted_passes_the_slot_on() {
    let sem = BudgetSemaphore::new(1);
    let held = sem.acquire(ms(0)).await.unwrap();
    let b = budget(1_000);
    // Queue a waiter by polling it once, by hand, so that it is granted but never polled
    // again before it is dropped.
    let mut first = Box::pin(b.scope(sem.acquire(ms(10))));
    assert!(futures_poll(&mut first).is_pending());
    let log = Log::default();
    let second = waiter(&sem, &log, "second", 2_000, ms(10), ms(1));
    settle().await;
    assert_eq!(sem.waiting(), 2);
    drop(held); // handed to `first` (earlier deadline)...
    assert_eq!(sem.waiting(), 1);
    drop(first); // ...which is dropped unpolled: the slot goes to `second`.
    second.await.unwrap().unwrap();
    assert_eq!(*log.lock().unwrap(), ["second"]);
    assert_eq!(sem.available_permits(), 1);
}

fn futures_poll<F: std::future::Future + Unpin>(f: &mut F) -> std::task::Poll<F::Output> {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    std::pin::Pin::new(f).poll(&mut cx)
}

#[tokio::test(start_paused = true)]
async fn long_budgets_get_their_share_under_a_flood_of_short_ones() {
    // One slot, 4 ms of work, a 40 ms-budget request every millisecond for a second: 4x
    // overload. Forty 400 ms-budget requests arrive among them, one every 9 ms. Earliest
    // deadline first gives every deadline the same chance: a long waiter is passed over while
    // the flood's deadlines are earlier, and is served when its own deadline comes up. So the
    // long ones are served about as often as the short ones, and every one served finishes
    // inside its budget; a queue that put short budgets first would starve them.
    let sem = BudgetSemaphore::new(1);
    let log = Log::default();
    let flood = tokio::spawn({
        let (sem, log) = (sem.clone(), log.clone());
        async move {
            let mut short = Vec::new();
            for _ in 0..1_000 {
                short.push((
                    Instant::now(),
                    waiter(&sem, &log, "short", 40, ms(10), ms(4)),
                ));
                tokio::time::sleep(ms(1)).await;
            }
            short
        }
    });
    tokio::time::sleep(ms(50)).await;
    let mut long = Vec::new();
    for _ in 0..40 {
        long.push((
            Instant::now(),
            waiter(&sem, &log, "long", 400, ms(10), ms(4)),
        ));
        tokio::time::sleep(ms(9)).await;
    }
    let served = |tasks: Vec<(
        Instant,
        tokio::task::JoinHandle<Result<Instant, BudgetError>>,
    )>,
                  budget: Duration| async move {
        let mut served = 0usize;
        let total = tasks.len();
        for (arrived, task) in tasks {
            match task.await.unwrap() {
                Ok(done) => {
                    assert!(done - arrived <= budget, "served inside its budget");
                    served += 1;
                }
                Err(e) => assert!(matches!(e, BudgetError::Refused(_)), "{e:?}"),
            }
        }
        served as f64 / total as f64
    };
    let long_share = served(long, ms(400)).await;
    let short_share = served(flood.await.unwrap(), ms(40)).await;
    assert!(
        long_share > 0.0 && long_share >= short_share * 0.5,
        "long {long_share:.2} vs short {short_share:.2}"
    );
    assert!(
        short_share > 0.15,
        "the flood is served too: {short_share:.2}"
    );
    assert_eq!(sem.available_permits(), 1);
}

#[tokio::test(start_paused = true)]
async fn adaptive_lifo_serves_the_newest_once_queueing_is_sustained() {
    let sem = BudgetSemaphore::with_queue(1, 16, QueuePolicy::AdaptiveLifo { after: ms(50) });
    let log = Log::default();
    let holder = waiter(&sem, &log, "holder", 1_000, ms(0), ms(20));
    settle().await;
    // Brief queueing: arrival order.
    let a = waiter(&sem, &log, "a", 1_000, ms(0), ms(1));
    settle().await;
    let b = waiter(&sem, &log, "b", 1_000, ms(0), ms(100));
    settle().await;
    holder.await.unwrap().unwrap();
    a.await.unwrap().unwrap();
    // `b` holds for 100 ms while c, d, e queue: sustained, so the newest goes first.
    settle().await;
    let later: Vec<_> = ["c", "d", "e"]
        .into_iter()
        .map(|n| waiter(&sem, &log, n, 1_000, ms(0), ms(1)))
        .collect();
    for t in std::iter::once(b).chain(later) {
        t.await.unwrap().unwrap();
    }
    assert_eq!(*log.lock().unwrap(), ["holder", "a", "b", "e", "d", "c"]);
}

#[tokio::test(start_paused = true)]
async fn beyond_the_queue_bound_a_newcomer_is_refused_at_once() {
    let sem = BudgetSemaphore::with_queue(1, 1, QueuePolicy::EarliestDeadlineFirst);
    let log = Log::default();
    let held = sem.acquire(ms(0)).await.unwrap();
    let queued = waiter(&sem, &log, "queued", 1_000, ms(0), ms(1));
    settle().await;
    let start = Instant::now();
    let b = budget(1_000);
    assert!(
        matches!(sem.acquire_with(&b, ms(5)).await, Err(BudgetError::Refused(r)) if r.required() == ms(5))
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
    drop(held);
    queued.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn without_a_budget_waiters_are_fifo_and_never_refused_for_time() {
    let sem = BudgetSemaphore::new(1);
    let log = Log::default();
    let held = sem.acquire(ms(1_000)).await.unwrap();
    let spawn = |name: &'static str| {
        let (sem, log) = (sem.clone(), log.clone());
        tokio::spawn(async move {
            let _p = sem.acquire(ms(1_000)).await.unwrap();
            log.lock().unwrap().push(name);
        })
    };
    let tasks = [spawn("1"), spawn("2"), spawn("3")];
    settle().await;
    tokio::time::sleep(ms(60_000)).await;
    drop(held);
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*log.lock().unwrap(), ["1", "2", "3"]);
}

/// A request that carries its budget and route, as an `http::Request` does in its extensions
/// and URI (that impl, with axum's matched route, is `http::admission`'s).
struct Req {
    path: String,
    budget: RequestBudget,
}

impl AdmissionRequest for Req {
    fn deadline(&self) -> Option<Deadline> {
        Some(self.budget.deadline())
    }

    fn route(&self) -> Option<&str> {
        Some(&self.path)
    }
}

/// The layer over a plain tower service: requests carry their budget.
#[tokio::test(start_paused = true)]
async fn the_layer_refuses_waiters_without_running_them_and_leaks_no_slot() {
    let ran = Arc::new(Mutex::new(Vec::new()));
    let inner = tower::service_fn({
        let ran = ran.clone();
        move |req: Req| {
            let ran = ran.clone();
            async move {
                ran.lock().unwrap().push(req.path.clone());
                tokio::time::sleep(ms(50)).await;
                Ok::<_, Infallible>(::http::Response::new(String::from("ok")))
            }
        }
    });
    let layer = AdmissionLayer::new(AdmissionConfig::new(1).with_route("/slow", ms(30)));
    let svc = layer.layer(inner);
    let req = |path: &str, budget_ms: u64| Req {
        path: path.to_owned(),
        budget: budget(budget_ms),
    };
    let first = tokio::spawn(svc.clone().oneshot(req("/first", 500)));
    settle().await;
    assert_eq!(layer.available(), 0);
    // Waits, then is refused at 20 ms (50 - 30) with the server layer's refusal.
    let res = svc.clone().oneshot(req("/slow", 50)).await.unwrap();
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers()["x-deadline-required-ms"], "30");
    assert_eq!(res.headers()["x-deadline-remaining-ms"], "30");
    assert_eq!(res.headers()["x-deadline-outcome"], "refused");
    // A waiter whose caller goes away leaves the queue at once.
    let mut gone = Box::pin(svc.clone().oneshot(req("/gone", 500)));
    assert!(futures_poll(&mut gone).is_pending());
    settle().await;
    assert_eq!(layer.waiting(), 1);
    drop(gone);
    assert_eq!(layer.waiting(), 0);
    assert_eq!(first.await.unwrap().unwrap().status(), 200);
    assert_eq!(
        *ran.lock().unwrap(),
        ["/first"],
        "refused and gone never ran"
    );
    assert_eq!(layer.available(), 1, "no slot leaked");
    // With a free slot the request runs.
    let mut svc = svc;
    let res = svc
        .ready()
        .await
        .unwrap()
        .call(req("/slow", 500))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
}

#[tokio::test(start_paused = true)]
async fn the_error_answer_returns_the_budget_error() {
    let inner = tower::service_fn(|_: Req| async { Ok::<_, tower::BoxError>(()) });
    let svc = AdmissionLayer::with_errors(AdmissionConfig::new(1).with_cost(ms(10))).layer(inner);
    let req = Req {
        path: "/".into(),
        budget: budget(5),
    };
    let err = svc.oneshot(req).await.unwrap_err();
    assert!(matches!(
        BudgetError::find(err.as_ref()),
        Some(BudgetError::Refused(_))
    ));
}

/// [C21](crate::contract#c21): `acquire()` under a cancelled ambient budget is refused with that cause, as
/// `acquire_with` is, and takes no permit.
#[tokio::test(start_paused = true)]
async fn acquire_under_a_cancelled_ambient_budget_is_refused() {
    let sem = BudgetSemaphore::new(1);
    let b = budget(1_000);
    b.cancel();
    let got = b.scope(sem.acquire(ms(5))).await;
    assert_eq!(got.unwrap_err(), BudgetError::Cancelled);
    assert_eq!(sem.available_permits(), 1, "no permit taken");
}

/// [C21](crate::contract#c21): a waiter whose budget is cancelled while it waits leaves the queue at once, although
/// its deadline is the earliest, and the freed permit goes to the live waiter behind it.
#[tokio::test(start_paused = true)]
async fn a_waiter_cancelled_while_queued_leaves_at_once_and_takes_no_slot() {
    let sem = BudgetSemaphore::new(1);
    let log = Log::default();
    let held = sem.acquire(ms(0)).await.unwrap();
    let early = budget(100);
    let gone = {
        let (sem, log) = (sem.clone(), log.clone());
        tokio::spawn(early.clone().scope(async move {
            let permit = sem.acquire(ms(5)).await?;
            log.lock().unwrap().push("cancelled");
            drop(permit);
            Ok::<_, BudgetError>(())
        }))
    };
    let live = waiter(&sem, &log, "live", 500, ms(5), ms(1));
    settle().await;
    assert_eq!(sem.waiting(), 2);
    early.cancel();
    settle().await;
    assert_eq!(
        sem.waiting(),
        1,
        "the cancelled waiter left the queue at once"
    );
    assert_eq!(gone.await.unwrap(), Err(BudgetError::Cancelled));
    drop(held);
    live.await.unwrap().unwrap();
    assert_eq!(*log.lock().unwrap(), ["live"]);
    assert_eq!(sem.available_permits(), 1);
}
