//! The demo's output: the side-by-side table printed on the terminal, a self-contained HTML
//! report (the figures as HTML tables, one request drawn as a timeline per mode, and inline
//! SVG charts drawn with plotters), and the JSON results.
//!
//! The charts are `charts.rs`; this file writes the files and lays out the page; the step
//! to overload has a page of its own (`step_page.rs`).

mod charts;
mod step_page;
mod style;

pub use step_page::step_html;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use self::charts::{DARK, GREY, Mark, histogram_chart, hop_bars, latency_chart, sweep_chart};
use super::results::DemoResults;
use super::timeline;
use style::STYLE;

/// The side-by-side table as text (see [`super::table`]).
pub fn table(r: &DemoResults) -> String {
    let mut out = super::table::text(r);
    let sweep = super::sweep::text(r);
    if !sweep.is_empty() {
        out.push('\n');
        out.push_str(&sweep);
    }
    out
}

/// Write `results.json`, `report.html` and `table.txt` into `dir`; returns the paths.
pub fn write_all(r: &DemoResults, dir: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let json = serde_json::to_string_pretty(r).map_err(|e| format!("cannot encode JSON: {e}"))?;
    let write = |name: &str, text: &str| -> Result<PathBuf, String> {
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
        Ok(p)
    };
    Ok(vec![
        write("table.txt", &table(r))?,
        write("results.json", &json)?,
        write("report.html", &html(r)?)?,
    ])
}

/// The self-contained HTML report.
pub fn html(r: &DemoResults) -> Result<String, String> {
    let mut h = String::new();
    let _ = writeln!(
        h,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>hopbudget demo: per-hop timeouts vs propagated deadlines</title>\
         <style>{STYLE}</style></head><body>"
    );
    let modes: Vec<&str> = r.modes.iter().map(|m| m.mode.as_str()).collect();
    let _ = writeln!(
        h,
        "<h1>hopbudget demo</h1>\n<p>The checkout call graph of scenario S7, run over the \
         same seeded arrival schedule in each mode ({}): <b>detached</b> gives every hop a \
         fresh timeout and runs its handler on a detached task, so work survives a caller \
         that left, as in a service that detaches its work; <b>timeouts</b> gives every hop \
         a fresh timeout and nothing else, with Rust's drop-cancellation (a caller that gives \
         up resets the call, and the callee's handler is dropped); <b>propagated</b> carries one \
         shrinking deadline through every hop with hopbudget (S18). Client budget {} ms, \
         client timeout {} ms.</p>",
        modes.join(", "),
        r.budget_ms,
        r.client_timeout_ms
    );
    let _ = writeln!(
        h,
        "<h2 id=\"figures\">Side by side</h2>\n{}",
        super::table::html(r)
    );
    let panels = timeline::svg(r);
    if let Some(id) = r
        .modes
        .iter()
        .find_map(|m| m.timeline.as_ref().map(|t| t.request_id))
    {
        let _ = writeln!(
            h,
            "<h2 id=\"timeline\">One request, per mode</h2><p>Request {id}, the same seeded request in every \
             mode: the one whose work went on longest after its client stopped waiting in the \
             first mode. Each bar is a hop, from arrival to its terminal status; inside it, \
             the hop's own work. Red work happened after the client had stopped waiting: work \
             for nobody.</p><p class=\"legend\">{}</p>",
            timeline::legend()
        );
        for (_, svg) in panels {
            let _ = writeln!(h, "<figure>{svg}</figure>");
        }
    }
    let _ = writeln!(
        h,
        "<h2 id=\"histogram\">Latency histogram per mode</h2><figure>{}</figure>",
        histogram_chart(
            r,
            "client latency (answer, error or giving up), 10 ms bins",
            "client latency (ms)",
            |m| &m.latencies_ms,
            10.0,
            &[
                Mark {
                    at_ms: r.budget_ms as f64,
                    label: format!("budget {} ms", r.budget_ms),
                    colour: GREY,
                },
                Mark {
                    at_ms: r.client_timeout_ms as f64,
                    label: format!("client timeout {} ms", r.client_timeout_ms),
                    colour: DARK,
                },
            ],
        )?
    );
    if let Some(name) = r.modes.first().and_then(|m| m.forgetful.clone())
        && let Some(spec) = r.topology.service(&name)
    {
        let _ = writeln!(
            h,
            "<h2 id=\"chain-break\">The chain break (S13): {name}'s hop durations</h2><p>In \
             propagated mode {name} ignores the inbound deadline and starts its own default of \
             {} ms, so the work below it runs against that default, not against the client's \
             budget; without propagation (detached) the same default bounds it. Hop durations \
             then pile up against a timeout someone configured instead of the budget: up to \
             {name}'s default, and in timeouts mode at the client's {} ms, where its giving up \
             reaches {name} by drop-cancellation. Where work waits long enough the pile-up sits \
             exactly at the default: the signature of a dropped deadline.</p>\
             <figure>{}</figure>",
            spec.timeout_ms,
            r.client_timeout_ms,
            histogram_chart(
                r,
                &format!("{name}: hop duration, 50 ms bins"),
                "hop duration (ms)",
                |m| &m.forgetful_hop_ms,
                50.0,
                &[
                    Mark {
                        at_ms: r.client_timeout_ms as f64,
                        label: format!("client timeout {} ms", r.client_timeout_ms),
                        colour: GREY,
                    },
                    Mark {
                        at_ms: spec.timeout_ms as f64,
                        label: format!("{name}'s default timeout {} ms", spec.timeout_ms),
                        colour: DARK,
                    },
                ],
            )?
        );
    }
    let _ = writeln!(
        h,
        "<h2 id=\"cdf\">Latency distribution per mode</h2><figure>{}</figure>",
        latency_chart(r)?
    );
    let _ = writeln!(
        h,
        "<h2 id=\"waterfall\">Budget waterfall per hop</h2><p>Median budget left when the request reached each \
         hop. Without propagation the hop does not know this number.</p><figure>{}</figure>",
        hop_bars(r, "budget left at arrival (median)", "ms", |x| x
            .budget_at_arrival_p50_ms
            .unwrap_or(0)
            as f64)?
    );
    let _ = writeln!(
        h,
        "<h2 id=\"refusals\">Refusals per hop</h2><figure>{}</figure>",
        hop_bars(r, "refused before work (C3)", "requests", |x| x.refused
            as f64)?
    );
    let _ = writeln!(
        h,
        "<h2 id=\"late-work\">Work after the client gave up, per hop</h2><figure>{}</figure>",
        hop_bars(r, "own work after the client stopped waiting", "ms", |x| x
            .work_after_give_up_ms)?
    );
    if !r.sweep.is_empty() {
        let _ = writeln!(
            h,
            "<h2 id=\"sweep\">Load sweep</h2><p>Offered load from 0.5x to 3x the graph's capacity (its \
             bottleneck's). Goodput counts answers within the budget, degraded ones (precomputed \
             or no recommendations) included; the thin lines count complete answers only.</p>\
             <figure>{}</figure>{}",
            sweep_chart(r)?,
            super::sweep::html(r)
        );
    }
    h.push_str("</body></html>\n");
    Ok(h)
}
