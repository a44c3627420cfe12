//! The load sweep (`--sweep`, scenario S17): every mode at 0.5x to 3x the graph's capacity,
//! and how it is shown: goodput, complete answers, the p99 of admitted requests and the
//! refusals per mode and load, as a text table (after the side-by-side one) and an HTML table
//! under the report's chart.
//!
//! Propagated mode runs its leaves behind hopbudget's admission layer (EDF, each waiter
//! dropped once its budget no longer covers the p99 of the leaf's work; see
//! `behaviour/propagated.rs`),
//! so this is where what the admission layer does past capacity shows, beside the modes
//! without it.

use std::fmt::Write as _;
use std::time::Duration;

use super::mode::Mode;
use super::options::DemoOptions;
use super::results::{self, DemoResults, SweepPoint};
use super::runner;
use super::table::escape;

/// The offered loads, as multiples of the graph's capacity.
pub const FACTORS: [f64; 5] = [0.5, 1.0, 1.5, 2.0, 3.0];

/// Run every mode of `opts` at every load of [`FACTORS`] times `capacity`.
pub fn run(opts: &DemoOptions, capacity: f64) -> Result<Vec<SweepPoint>, String> {
    let topo = &opts.topology;
    let mut sweep = Vec::new();
    for factor in FACTORS {
        let rate = capacity * factor;
        let mut point = SweepPoint {
            load_factor: factor,
            rate_per_s: rate,
            goodput_per_s: Vec::new(),
            full_goodput_per_s: Vec::new(),
            p99_ms: Vec::new(),
            admitted_p99_ms: Vec::new(),
            refused_per_s: Vec::new(),
            expired_per_s: Vec::new(),
        };
        for &mode in &opts.modes {
            let spec = runner::RunSpec {
                mode,
                rate_per_s: rate,
                duration: opts.sweep_duration,
                forgetful: opts.forgetful.clone(),
                drain_limit: Duration::from_secs(1),
                progress: opts.progress,
                label: format!("sweep {factor}x {}", mode.as_str()),
                broker: opts.broker.clone(),
                arrivals: None,
                retries: None,
            };
            let data = runner::run(topo, &spec)?;
            let r = results::summarise(topo, mode, None, rate, opts.sweep_duration, &data);
            point.goodput_per_s.push((mode, r.goodput_per_s));
            point.full_goodput_per_s.push((mode, r.full_goodput_per_s));
            point.p99_ms.push((mode, r.client_latency_ms.p99));
            point
                .admitted_p99_ms
                .push((mode, r.admitted_latency_ms.p99));
            point.refused_per_s.push((mode, r.hop_refusals_per_s));
            let expired: u64 = r.hops.iter().map(|h| h.expired).sum();
            point.expired_per_s.push((
                mode,
                expired as f64 / opts.sweep_duration.as_secs_f64().max(0.001),
            ));
        }
        sweep.push(point);
    }
    Ok(sweep)
}

/// The column heads of the sweep table.
const HEADS: [&str; 8] = [
    "load",
    "offered/s",
    "mode",
    "goodput/s",
    "complete/s",
    "complete/capacity",
    "admitted p99 ms",
    "refusals/s",
];

/// One row per load and mode.
fn rows(r: &DemoResults) -> Vec<[String; 8]> {
    let mut out = Vec::new();
    for p in &r.sweep {
        for m in &r.modes {
            let mode = m.mode;
            let fig = |of: fn(&SweepPoint) -> &Vec<(Mode, f64)>| p.get(of, mode);
            let num = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1}"));
            let complete = fig(|p| &p.full_goodput_per_s);
            let p99 = fig(|p| &p.admitted_p99_ms).map_or("-".to_owned(), |v| {
                let over = if v > r.budget_ms as f64 {
                    " (over budget)"
                } else {
                    ""
                };
                format!("{v:.0}{over}")
            });
            out.push([
                format!("{}x", p.load_factor),
                format!("{:.0}", p.rate_per_s),
                mode.as_str().to_owned(),
                num(fig(|p| &p.goodput_per_s)),
                num(complete),
                complete.map_or("-".to_owned(), |g| {
                    format!("{:.0}%", 100.0 * g / r.capacity_per_s.max(0.001))
                }),
                p99,
                num(fig(|p| &p.refused_per_s)),
            ]);
        }
    }
    out
}

fn caption(r: &DemoResults) -> String {
    format!(
        "Load sweep: capacity {:.0} req/s ({}), budget {} ms. Goodput counts answers within \
         the budget (degraded ones included), complete/s those with every optional call, \
         which need the bottleneck and are measured against its capacity; admitted p99 is the client latency of every request not answered with a refusal; \
         refusals are summed over every hop. Propagated mode runs its leaves behind the \
         admission layer (EDF).",
        r.capacity_per_s, r.bottleneck, r.budget_ms
    )
}

/// The sweep as a text table; empty when no sweep ran.
pub fn text(r: &DemoResults) -> String {
    if r.sweep.is_empty() {
        return String::new();
    }
    let rows = rows(r);
    let widths: Vec<usize> = (0..HEADS.len())
        .map(|i| {
            rows.iter()
                .map(|row| row[i].len())
                .chain([HEADS[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let line = |out: &mut String, cells: &[&str]| {
        for (i, c) in cells.iter().enumerate() {
            let _ = write!(out, "{c:>w$}  ", w = widths[i]);
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
    };
    line(&mut out, &HEADS);
    for row in &rows {
        line(&mut out, &row.each_ref().map(String::as_str));
    }
    let _ = writeln!(out, "{caption}", caption = caption(r));
    out
}

/// The sweep as an HTML table; empty when no sweep ran.
pub fn html(r: &DemoResults) -> String {
    if r.sweep.is_empty() {
        return String::new();
    }
    let mut h = String::from("<table class=\"figures sweep\"><thead><tr>");
    for head in HEADS {
        let _ = write!(h, "<th>{}</th>", escape(head));
    }
    h.push_str("</tr></thead><tbody>\n");
    for row in rows(r) {
        h.push_str("<tr>");
        for c in row {
            let _ = write!(h, "<td>{}</td>", escape(&c));
        }
        h.push_str("</tr>\n");
    }
    let _ = writeln!(h, "</tbody></table><p>{}</p>", escape(&caption(r)));
    h
}
