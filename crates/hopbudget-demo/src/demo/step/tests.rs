//! The step to overload on tokio's paused clock (S22): hopbudget's admission queue
//! ([`BudgetSemaphore`], the queue behind the demo's `AdmissionLayer`) under a step of
//! arrivals from capacity to three times it and back, measured by the same code as the demo's
//! real runs ([`measure`]). Exact instants, so every figure is the same on any machine.
//!
//! It fails when the queue stops refusing work that cannot finish: without the refusal
//! before start (a request whose budget is already below the work's cost takes a free slot)
//! or without the drop of expired waiters (a waiter stays queued past the instant its work
//! could still finish, and is served late or never leaves).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopbudget::admission::BudgetSemaphore;
use hopbudget::{HopPolicy, RequestBudget};
use tokio::time::Instant;

use super::measure::{self, Phases, Request, Work};

const SLOTS: usize = 2;
/// Every request's work; also its admission cost (the work's p99, here its only value).
const WORK: Duration = Duration::from_millis(40);
/// The entry budget.
const BUDGET: Duration = Duration::from_millis(500);
/// One request in ten arrives with less budget than its work needs (it spent it upstream).
const SHORT: Duration = Duration::from_millis(30);

fn capacity() -> f64 {
    SLOTS as f64 / WORK.as_secs_f64()
}

/// What the test saw of one request.
#[derive(Clone, Copy, Debug)]
struct Seen {
    arrival: Duration,
    deadline: Duration,
    end: Option<Duration>,
    /// When it got its slot.
    started: Option<Duration>,
    work: Option<(Duration, Duration)>,
    refused: bool,
}

/// A waiter that can no longer finish in time, as seen at one sample. Tokio's timers fire
/// on the millisecond, so a waiter leaves up to 1 ms after its exact refusal instant.
fn hopeless(s: &Seen, now: Duration) -> bool {
    s.end.is_none() && s.started.is_none() && now + WORK > s.deadline + Duration::from_millis(1)
}

/// Run the step and return every request, and the queue length and the hopeless waiters
/// at every 50 ms.
async fn step(phases: Phases, factor: f64) -> (Vec<Seen>, Vec<(Duration, usize, usize)>) {
    // Earliest deadline first, the library's default and the demo's.
    let sem = BudgetSemaphore::new(SLOTS);
    let seen = Arc::new(Mutex::new(Vec::<Seen>::new()));
    let t0 = Instant::now();
    let since = move || Instant::now() - t0;
    let arrivals = {
        let mut out = super::arrivals(capacity(), factor, phases.up);
        // A longer last phase than the others, to watch the queue drain.
        let tail = capacity() * (phases.end - phases.down - phases.up).as_secs_f64();
        let n = tail.round() as u64;
        out.extend(
            (0..n)
                .map(|k| phases.down + phases.up + Duration::from_secs_f64(k as f64 / capacity())),
        );
        out
    };
    let sampler = tokio::spawn({
        let (sem, seen) = (sem.clone(), seen.clone());
        async move {
            let mut out = Vec::new();
            let mut tick = tokio::time::interval_at(t0, measure::WINDOW);
            loop {
                tick.tick().await;
                let now = since();
                if now >= phases.end + BUDGET {
                    return out;
                }
                let stuck = seen
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|s| hopeless(s, now))
                    .count();
                out.push((now, sem.waiting(), stuck));
            }
        }
    });
    let mut tasks = Vec::new();
    for (i, at) in arrivals.into_iter().enumerate() {
        tokio::time::sleep_until(t0 + at).await;
        let budget = if i % 10 == 9 { SHORT } else { BUDGET };
        let idx = {
            let mut s = seen.lock().unwrap();
            s.push(Seen {
                arrival: since(),
                deadline: since() + budget,
                end: None,
                started: None,
                work: None,
                refused: false,
            });
            s.len() - 1
        };
        let (sem, seen) = (sem.clone(), seen.clone());
        let b = RequestBudget::local(budget, HopPolicy::DEFAULT);
        tasks.push(tokio::spawn(async move {
            let permit = sem.acquire_with(&b, WORK).await;
            let Ok(_permit) = permit else {
                let mut s = seen.lock().unwrap();
                s[idx].refused = true;
                s[idx].end = Some(since());
                return;
            };
            let start = since();
            seen.lock().unwrap()[idx].started = Some(start);
            // The work runs to its end whatever the deadline: what a slot is spent on.
            tokio::time::sleep(WORK).await;
            let mut s = seen.lock().unwrap();
            s[idx].work = Some((start, since()));
            s[idx].end = Some(since());
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let samples = sampler.await.unwrap();
    let seen = seen.lock().unwrap().clone();
    (seen, samples)
}

/// Steady at capacity for 2 s, three times capacity for 2 s, capacity again for 4 s.
const PHASES: Phases = Phases {
    up: Duration::from_secs(2),
    down: Duration::from_secs(4),
    end: Duration::from_secs(8),
};

/// The step: its figures, every request, and the samples with hopeless waiters.
async fn measured() -> (measure::StepFigures, Vec<Seen>, usize) {
    let (seen, samples) = step(PHASES, 3.0).await;
    let requests: Vec<Request> = seen
        .iter()
        .map(|s| Request {
            arrival: s.arrival,
            end: s.end,
            ok: s.work.is_some(),
            refused: s.refused,
        })
        .collect();
    let work: Vec<Work> = seen
        .iter()
        .filter_map(|s| {
            s.work.map(|(start, end)| Work {
                start,
                end,
                deadline: s.deadline,
            })
        })
        .collect();
    let queue: Vec<(Duration, usize)> = samples.iter().map(|(at, q, _)| (*at, *q)).collect();
    let f = measure::figures(&requests, &work, &queue, PHASES, BUDGET);
    // Nothing admitted ran past its deadline, at any time (C3, C21).
    let late: Vec<&Work> = work.iter().filter(|w| w.end > w.deadline).collect();
    assert!(
        late.is_empty(),
        "{} admitted requests ended late: {:?}",
        late.len(),
        late.first()
    );
    let stuck = samples.iter().filter(|(_, _, s)| *s > 0).count();
    (f, seen, stuck)
}

fn within_budget(v: Option<f64>) -> bool {
    v.is_some_and(|ms| ms <= BUDGET.as_secs_f64() * 1000.0)
}

#[tokio::test(start_paused = true)]
async fn after_a_step_to_three_times_capacity_nothing_is_left_queued_for_nobody() {
    let (f, seen, stuck) = measured().await;
    eprintln!("{f:#?}");
    assert_eq!(f.dead_after_down, 0, "{f:?}");
    // Nobody waited for a slot once their work could no longer finish ...
    assert_eq!(stuck, 0, "samples with hopeless waiters still queued");
    // ... so the admitted p99 stays inside the budget in every 50 ms window,
    assert_eq!(f.windows_over_budget.0, 0, "{f:?}");
    assert!(f.worst_window_p99_ms <= BUDGET.as_secs_f64() * 1000.0);
    // goodput holds the capacity under the overload and settles within one budget,
    assert!(f.goodput_high_per_s >= 0.9 * capacity(), "{f:?}");
    assert!(within_budget(f.up_converged_ms), "{f:?}");
    assert!(within_budget(f.down_converged_ms), "{f:?}");
    // and everything queued when the load fell has left the queue (served or refused)
    // within one budget of the fall.
    let backlog: Vec<&Seen> = seen
        .iter()
        .filter(|s| s.arrival < PHASES.down && s.end.is_some_and(|e| e > PHASES.down))
        .filter(|s| s.work.is_none_or(|(start, _)| start > PHASES.down))
        .collect();
    assert!(!backlog.is_empty(), "the overload left a queue");
    let last = backlog.iter().filter_map(|s| s.end).max().unwrap();
    assert!(
        last <= PHASES.down + BUDGET,
        "a waiter queued at the step down left {last:?} after the start"
    );
    // The queue itself is back to its steady length only once the load below capacity has
    // worked it off (4 s here, at 0.9x): the waiters that joined behind the backlog can all
    // still finish, and earliest-deadline-first serves them in turn. Not asserted: a figure
    // of the policy, not a property (docs/performance.md, the step to overload).
}

#[test]
fn goodput_settles_where_its_average_stays_in_the_band_and_p99_is_nearest_rank() {
    // 1 s at 10/s, then 250 ms of nothing, then 30/s: settled 250 ms after the step.
    let mut series = vec![10.0; 20];
    series.extend([0.0; 5]);
    series.extend([30.0; 35]);
    let (ms, steady) = measure::converged(&series, 20, series.len());
    assert_eq!(steady, 30.0);
    assert_eq!(ms, Some(250.0));
    // A dip later in the phase moves the settling point past it.
    series[35..38].fill(0.0);
    let (ms, _) = measure::converged(&series, 20, series.len());
    assert_eq!(ms, Some(900.0));
    let mut v: Vec<f64> = (1..=200).map(f64::from).collect();
    assert_eq!(measure::p99(&mut v), Some(198.0));
    assert_eq!(measure::p99(&mut []), None);
}
