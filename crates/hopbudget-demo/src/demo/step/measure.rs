//! What a step to overload is measured by (S22), from plain records of one run: when each
//! request arrived and ended, when each piece of work ran, and the queues sampled over time.
//! Kept apart from the run so that the same figures come from a real run on loopback and from
//! a test of the library's admission queue on tokio's paused clock.
//!
//! - **Goodput** in windows of [`WINDOW`] (50 ms): answers within the budget, counted in the
//!   window their request arrived in (per second of arrivals, as the load sweep counts it:
//!   what became of the requests sent then). Counted by the window the answer came back in,
//!   it arrives in bursts (a fan-out answers when its slowest call does), and a 250 ms
//!   window of it varied by a third at a steady 3x. Its **steady state** in a phase is the
//!   mean over the phase's second half. After a step the goodput has **settled** from the
//!   first window from which its average over the next [`SMOOTH`] windows (500 ms) stays
//!   within [`TOLERANCE`] (5%) of that steady state to the end of the phase. At a steady 33
//!   arrivals per second 500 ms hold 16 or 17 of them, so the band is never narrower than one
//!   answer per 500 ms, the resolution of the count.
//! - **Admitted p99** in windows of 50 ms by arrival: the p99 of the client latency of the
//!   requests that arrived in the window and were not refused (a request the client gave up
//!   on counts with the time it waited).
//! - **Dead work**: work that ran past its request's deadline (the client's start plus the
//!   budget): nobody can use its answer any more.
//! - **Queues**: hops waiting for a work slot, summed over the graph, as sampled.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Width of a measurement window.
pub const WINDOW: Duration = Duration::from_millis(50);
/// Windows in the moving average that decides convergence (500 ms).
pub const SMOOTH: usize = 10;
/// How close to its steady state goodput must stay to have converged.
pub const TOLERANCE: f64 = 0.05;

/// One request, as offsets from the first arrival.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Request {
    /// When it was sent.
    pub arrival: Duration,
    /// When the client stopped waiting (`None`: never, which a finished run does not have).
    pub end: Option<Duration>,
    /// A successful answer.
    pub ok: bool,
    /// Answered with a refusal (not admitted).
    pub refused: bool,
}

/// One interval of a hop's own work, as offsets from the first arrival.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Work {
    /// Start.
    pub start: Duration,
    /// End (done, or stopped).
    pub end: Duration,
    /// Its request's deadline.
    pub deadline: Duration,
}

/// The shape of the load: steady until `up`, overloaded until `down`, steady until `end`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Phases {
    /// The step up.
    pub up: Duration,
    /// The step down.
    pub down: Duration,
    /// The last arrival window ends.
    pub end: Duration,
}

/// The figures of one step.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepFigures {
    /// Steady goodput before the step up, answers within budget per second.
    pub goodput_before_per_s: f64,
    /// Steady goodput during the overload.
    pub goodput_high_per_s: f64,
    /// Steady goodput after the step down.
    pub goodput_after_per_s: f64,
    /// Time from the step up until goodput converged, ms (`None`: it never did).
    pub up_converged_ms: Option<f64>,
    /// Time from the step down until goodput converged, ms.
    pub down_converged_ms: Option<f64>,
    /// Time from the step down until goodput was back within the band of its steady state
    /// before the step, and stayed there, ms (`None`: not by the end of the run): a graph
    /// that collapsed settles after the step down too, at its collapsed level.
    pub recovered_ms: Option<f64>,
    /// p99 client latency of the admitted requests that arrived from the step up until one
    /// budget after the step down, ms.
    pub step_p99_ms: f64,
    /// The worst 50 ms window's admitted p99 over the same span, ms.
    pub worst_window_p99_ms: f64,
    /// Windows of that span whose admitted p99 was over the budget, and how many had any
    /// admitted request.
    pub windows_over_budget: (usize, usize),
    /// Mean of the sampled queues over the second half of the steady phase before the step.
    pub queue_before: f64,
    /// Largest sampled queue.
    pub queue_peak: usize,
    /// Mean of the sampled queues over the second half of the phase after the step down.
    pub queue_after: f64,
    /// Time from the step down until the sampled queues were first back to at most their
    /// largest sample in the steady phase before the step, ms (whether they stayed there is
    /// `queue_after`, the mean over the last phase's second half).
    pub queue_drained_ms: Option<f64>,
    /// Pieces of hop work that were still running past their request's deadline after the
    /// step down.
    pub dead_after_down: usize,
    /// Work done past deadlines after the step down, ms (slot time spent for nobody).
    pub dead_work_after_down_ms: f64,
}

/// Goodput per window of arrival, answers within `budget` per second, over `[0, end)`.
pub fn goodput(requests: &[Request], budget: Duration, end: Duration) -> Vec<f64> {
    let n = windows(end);
    let mut out = vec![0.0; n];
    for r in requests {
        let Some(at) = r.end else { continue };
        if r.ok && at.saturating_sub(r.arrival) <= budget {
            let w = index(r.arrival);
            if w < n {
                out[w] += 1.0 / WINDOW.as_secs_f64();
            }
        }
    }
    out
}

/// Admitted p99 per arrival window, ms (`None`: no admitted request arrived then).
pub fn admitted_p99(requests: &[Request], end: Duration) -> Vec<Option<f64>> {
    let n = windows(end);
    let mut by_window: Vec<Vec<f64>> = vec![Vec::new(); n];
    for r in requests {
        let Some(at) = r.end else { continue };
        let w = index(r.arrival);
        if !r.refused && w < n {
            by_window[w].push(at.saturating_sub(r.arrival).as_secs_f64() * 1000.0);
        }
    }
    by_window.into_iter().map(|mut v| p99(&mut v)).collect()
}

/// Nearest-rank p99 (`None` for no values).
pub fn p99(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((values.len() as f64) * 0.99).ceil() as usize;
    Some(values[rank.clamp(1, values.len()) - 1])
}

/// Time from window `from` (the step) until the goodput settled to its steady state over
/// the windows up to `to`, ms; and that steady state.
pub fn converged(series: &[f64], from: usize, to: usize) -> (Option<f64>, f64) {
    let to = to.min(series.len());
    if to <= from + 2 * SMOOTH {
        return (None, 0.0);
    }
    let half = from + (to - from) / 2;
    let steady = series[half..to].iter().sum::<f64>() / (to - half) as f64;
    (settled(series, from, to, steady), steady)
}

/// Time from window `from` until the goodput's average over the next [`SMOOTH`] windows
/// stays within the band around `steady` up to window `to`, ms.
pub fn settled(series: &[f64], from: usize, to: usize, steady: f64) -> Option<f64> {
    let to = to.min(series.len());
    if to < from + SMOOTH {
        return None;
    }
    let floor = 1.0 / (SMOOTH as f64 * WINDOW.as_secs_f64());
    let band = (TOLERANCE * steady).max(floor);
    // The average of the 500 ms from `w` on; only windows whose average lies in the phase.
    let smooth = |w: usize| series[w..w + SMOOTH].iter().sum::<f64>() / SMOOTH as f64;
    let last = to - SMOOTH;
    let mut settled = None;
    for w in (from..=last).rev() {
        if (smooth(w) - steady).abs() > band {
            break;
        }
        settled = Some(w);
    }
    settled.map(|w| (w - from) as f64 * WINDOW.as_secs_f64() * 1000.0)
}

/// Every figure of one step.
pub fn figures(
    requests: &[Request],
    work: &[Work],
    queue: &[(Duration, usize)],
    phases: Phases,
    budget: Duration,
) -> StepFigures {
    let (up, down, end) = (index(phases.up), index(phases.down), index(phases.end));
    let series = goodput(requests, budget, phases.end);
    let (_, before) = converged(&series, 0, up);
    let (up_ms, high) = converged(&series, up, down);
    let (down_ms, after) = converged(&series, down, end);
    let recovered = settled(&series, down, end, before);

    // Admitted p99 from the step up until one budget after the step down: the requests the
    // overload could have delayed.
    let span_end = index(phases.down + budget).min(end);
    let p99s = admitted_p99(requests, phases.end);
    let span = &p99s[up.min(p99s.len())..span_end.min(p99s.len())];
    let mut all: Vec<f64> = requests
        .iter()
        .filter(|r| !r.refused && r.arrival >= phases.up && r.arrival < phases.down + budget)
        .filter_map(|r| {
            r.end
                .map(|e| e.saturating_sub(r.arrival).as_secs_f64() * 1000.0)
        })
        .collect();
    let budget_ms = budget.as_secs_f64() * 1000.0;

    let mean = |from: Duration, to: Duration| {
        let v: Vec<usize> = queue
            .iter()
            .filter(|(at, _)| *at >= from && *at < to)
            .map(|(_, q)| *q)
            .collect();
        v.iter().sum::<usize>() as f64 / v.len().max(1) as f64
    };
    let drained = drained(queue, phases).map(|d| d.as_secs_f64() * 1000.0);

    let dead: Vec<&Work> = work
        .iter()
        .filter(|w| w.end > w.deadline && w.end > phases.down)
        .collect();
    StepFigures {
        goodput_before_per_s: before,
        goodput_high_per_s: high,
        goodput_after_per_s: after,
        up_converged_ms: up_ms,
        down_converged_ms: down_ms,
        recovered_ms: recovered,
        step_p99_ms: p99(&mut all).unwrap_or(0.0),
        worst_window_p99_ms: span.iter().flatten().copied().fold(0.0, f64::max),
        windows_over_budget: (
            span.iter().flatten().filter(|p| **p > budget_ms).count(),
            span.iter().flatten().count(),
        ),
        queue_before: mean(phases.up / 2, phases.up),
        queue_peak: queue.iter().map(|(_, q)| *q).max().unwrap_or(0),
        queue_after: mean(phases.down + (phases.end - phases.down) / 2, phases.end),
        queue_drained_ms: drained,
        dead_after_down: dead.len(),
        dead_work_after_down_ms: dead
            .iter()
            .map(|w| {
                w.end
                    .saturating_sub(w.deadline.max(w.start).max(phases.down))
                    .as_secs_f64()
                    * 1000.0
            })
            .fold(0.0, |sum, ms| sum + ms),
    }
}

/// When, after the step down, the queues are first back to at most their largest sample in
/// the second half of the steady phase before the step (`None`: not by the last sample).
fn drained(queue: &[(Duration, usize)], phases: Phases) -> Option<Duration> {
    let steady = queue
        .iter()
        .filter(|(at, _)| *at >= phases.up / 2 && *at < phases.up)
        .map(|(_, q)| *q)
        .max()?;
    queue
        .iter()
        .find(|(at, q)| *at >= phases.down && *q <= steady)
        .map(|(at, _)| *at - phases.down)
}

fn windows(end: Duration) -> usize {
    end.as_nanos().div_ceil(WINDOW.as_nanos()) as usize
}

fn index(at: Duration) -> usize {
    (at.as_nanos() / WINDOW.as_nanos()) as usize
}
