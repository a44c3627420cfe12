//! The step to overload (`demo --step`, scenario S22): offered load steady at the graph's
//! capacity, then at once [`FACTORS`] times it, held, then back, over real sockets with the
//! demo's services, every mode over the same arrivals; and how each mode came through it
//! ([`measure`]): how long goodput took to settle after each step, the admitted p99 during
//! the overload, and whether anything was left queued or working for nobody once the load
//! was back to normal.
//!
//! Arrivals are evenly spaced rather than the seeded Poisson schedule of the other runs: the
//! question is the response to the step, and 500 ms of Poisson arrivals at 33 per second
//! (16.5 expected) vary by a quarter (one standard deviation), far more than the 5% band
//! settling is judged by.

pub mod measure;

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::mode::Mode;
use super::options::DemoOptions;
use super::runner;
use measure::{Phases, Request, StepFigures, Work};

/// The overloads stepped to, as multiples of the graph's capacity.
pub const FACTORS: [f64; 2] = [2.0, 3.0];

/// One mode through one step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepRun {
    /// The overload, as a multiple of capacity.
    pub load_factor: f64,
    /// The mode.
    pub mode: Mode,
    /// Steady load, requests per second (the graph's capacity).
    pub base_per_s: f64,
    /// Seconds of each phase.
    pub phase_s: f64,
    /// The client budget, ms.
    pub budget_ms: u64,
    /// What was measured.
    pub figures: StepFigures,
    /// Goodput per 50 ms window of arrival, answers within budget per second (for charts).
    pub goodput_per_window: Vec<f64>,
    /// Admitted p99 per 50 ms window of arrival, ms (`None`: nothing admitted arrived then).
    pub admitted_p99_per_window: Vec<Option<f64>>,
    /// Hops waiting for a work slot, sampled every 50 ms.
    pub queued_per_window: Vec<usize>,
}

/// Evenly spaced arrivals: `base` per second for `phase`, `base * factor` for `phase`, `base`
/// for `phase`.
pub fn arrivals(base: f64, factor: f64, phase: Duration) -> Vec<Duration> {
    let mut out = Vec::new();
    for (i, rate) in [base, base * factor, base].into_iter().enumerate() {
        let from = phase * i as u32;
        let n = (rate * phase.as_secs_f64()).round() as u64;
        out.extend((0..n).map(|k| from + Duration::from_secs_f64(k as f64 / rate)));
    }
    out
}

/// Every mode of `opts` through a step to each of [`FACTORS`], `phase` per phase.
pub fn run(opts: &DemoOptions, phase: Duration) -> Result<Vec<StepRun>, String> {
    let topo = &opts.topology;
    let base = topo.capacity_per_s();
    let budget = Duration::from_millis(topo.client.budget_ms);
    let phases = Phases {
        up: phase,
        down: phase * 2,
        end: phase * 3,
    };
    let mut out = Vec::new();
    for factor in FACTORS {
        let given: Arc<[Duration]> = arrivals(base, factor, phase).into();
        for &mode in &opts.modes {
            let spec = runner::RunSpec {
                mode,
                rate_per_s: base,
                duration: phase * 3,
                forgetful: None,
                drain_limit: Duration::from_secs(2),
                progress: opts.progress,
                label: format!("step {factor}x {}", mode.as_str()),
                broker: opts.broker.clone(),
                arrivals: Some(given.clone()),
                retries: None,
            };
            let data = runner::run(topo, &spec)?;
            let (requests, work, queue) = records(&data, budget);
            out.push(StepRun {
                load_factor: factor,
                mode,
                base_per_s: base,
                phase_s: phase.as_secs_f64(),
                budget_ms: topo.client.budget_ms,
                figures: measure::figures(&requests, &work, &queue, phases, budget),
                goodput_per_window: measure::goodput(&requests, budget, phases.end),
                admitted_p99_per_window: measure::admitted_p99(&requests, phases.end),
                queued_per_window: queue.iter().map(|(_, q)| *q).collect(),
            });
        }
    }
    Ok(out)
}

type Records = (Vec<Request>, Vec<Work>, Vec<(Duration, usize)>);

/// One run's records as offsets from its first arrival.
fn records(data: &runner::RunData, budget: Duration) -> Records {
    let t0 = data.started;
    let clients = data.collector.clients();
    let requests = clients
        .values()
        .map(|c| Request {
            arrival: c.start.saturating_duration_since(t0),
            end: c.end.map(|e| e.saturating_duration_since(t0)),
            ok: c.ok,
            refused: c.refused,
        })
        .collect();
    let work = data
        .collector
        .work_records()
        .iter()
        .filter_map(|w| {
            let c = clients.get(&w.id)?;
            Some(Work {
                start: w.start.saturating_duration_since(t0),
                end: w.end.saturating_duration_since(t0),
                deadline: (c.start + budget).saturating_duration_since(t0),
            })
        })
        .collect();
    let queue = data.samples.iter().map(|s| (s.at, s.queued)).collect();
    (requests, work, queue)
}

/// The heads of the figures' columns, as [`rows`] fills them.
pub const HEADS: [&str; 12] = [
    "step",
    "mode",
    "goodput/s before/high/after",
    "settled after up",
    "settled after down",
    "back to before",
    "admitted p99",
    "worst 50 ms p99",
    "windows over budget",
    "queued before/peak/after",
    "queue drained",
    "dead work after down",
];

fn ms(v: Option<f64>) -> String {
    v.map_or("never".to_owned(), |v| format!("{v:.0} ms"))
}

/// One row per step and mode.
pub fn rows(runs: &[StepRun]) -> Vec<[String; 12]> {
    runs.iter()
        .map(|r| {
            let f = &r.figures;
            [
                format!("1x-{}x-1x", r.load_factor),
                r.mode.as_str().to_owned(),
                format!(
                    "{:.1} / {:.1} / {:.1}",
                    f.goodput_before_per_s, f.goodput_high_per_s, f.goodput_after_per_s
                ),
                ms(f.up_converged_ms),
                ms(f.down_converged_ms),
                ms(f.recovered_ms),
                format!("{:.0} ms", f.step_p99_ms),
                format!("{:.0} ms", f.worst_window_p99_ms),
                format!("{} of {}", f.windows_over_budget.0, f.windows_over_budget.1),
                format!(
                    "{:.1} / {} / {:.1}",
                    f.queue_before, f.queue_peak, f.queue_after
                ),
                ms(f.queue_drained_ms),
                format!(
                    "{} ({:.0} ms)",
                    f.dead_after_down, f.dead_work_after_down_ms
                ),
            ]
        })
        .collect()
}

/// The step runs as a text table with its caption; empty for no runs.
pub fn text(runs: &[StepRun]) -> String {
    let Some(first) = runs.first() else {
        return String::new();
    };
    let rows = rows(runs);
    let heads = &HEADS;
    let widths: Vec<usize> = (0..heads.len())
        .map(|i| {
            rows.iter()
                .map(|row| row[i].chars().count())
                .chain([heads[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let line = |out: &mut String, cells: &[&str]| {
        for (i, c) in cells.iter().enumerate() {
            let pad = widths[i].saturating_sub(c.chars().count());
            let _ = write!(out, "{}{c}  ", " ".repeat(pad));
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
    };
    line(&mut out, heads.as_slice());
    for row in &rows {
        line(&mut out, &row.each_ref().map(String::as_str));
    }
    let _ = writeln!(
        out,
        "Step to overload: {:.0} req/s (capacity), then the step's multiple, then back, {:.0} s \
         each, evenly spaced arrivals, budget {} ms. Goodput counts answers within the budget \
         by the 50 ms window their request arrived in; settled: the first window from which \
         the average of the next {} ms stays within 5% of the phase's steady state (the mean \
         of its second half) to the end of the phase; back to before: the same, against the \
         steady state before the step. Admitted p99: requests not refused, arriving from the \
         step up to one budget after the step down. Queued: hops waiting for a work slot, \
         summed over the graph, sampled every 50 ms; drained: from the step down until it \
         is first back to its largest steady sample before the step. Dead work: pieces of \
         hop work still running past their request's deadline after the step down, and the \
         time they ran past it.",
        first.base_per_s,
        first.phase_s,
        first.budget_ms,
        measure::SMOOTH as u128 * measure::WINDOW.as_millis()
    );
    out
}

#[cfg(test)]
mod tests;
