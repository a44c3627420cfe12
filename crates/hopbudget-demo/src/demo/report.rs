//! The demo's output: the side-by-side table printed on the terminal, a self-contained HTML
//! report (the figures as HTML tables, one request drawn as a timeline per mode, and inline
//! SVG charts drawn with plotters), and the JSON results.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::mode::Mode;
use super::results::HopResult;
use super::{DemoResults, timeline};

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

/// One colour per mode, the same in every chart.
fn mode_color(mode: Mode) -> RGBColor {
    match mode {
        Mode::Detached => RGBColor(178, 24, 43),
        Mode::Timeouts => RGBColor(230, 145, 56),
        Mode::Propagated => RGBColor(67, 147, 195),
    }
}

fn err(e: impl std::fmt::Display) -> String {
    format!("chart: {e}")
}

/// Latency distribution per mode: the CDF of client latency.
fn latency_chart(r: &DemoResults) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (720, 380)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let xmax = r
            .modes
            .iter()
            .filter_map(|m| m.latencies_ms.last().copied())
            .fold(r.budget_ms as f64 * 1.2, f64::max)
            * 1.05;
        let mut chart = ChartBuilder::on(&root)
            .caption("client latency, cumulative share", ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(48)
            .build_cartesian_2d(0f64..xmax, 0f64..1.0)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("client latency (ms)")
            .y_desc("share of requests")
            .draw()
            .map_err(err)?;
        let budget = r.budget_ms as f64;
        chart
            .draw_series(LineSeries::new(
                vec![(budget, 0.0), (budget, 1.0)],
                RGBColor(120, 120, 120).stroke_width(3),
            ))
            .map_err(err)?
            .label(format!("budget {} ms", r.budget_ms))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], RGBColor(120, 120, 120)));
        for m in &r.modes {
            let n = m.latencies_ms.len().max(1) as f64;
            let step = (m.latencies_ms.len() / 400).max(1);
            let mut pts: Vec<(f64, f64)> = m
                .latencies_ms
                .iter()
                .enumerate()
                .step_by(step)
                .map(|(k, &v)| (v, (k + 1) as f64 / n))
                .collect();
            if let Some(&last) = m.latencies_ms.last() {
                pts.push((last, 1.0));
            }
            let c = mode_color(m.mode);
            chart
                .draw_series(LineSeries::new(pts, c.stroke_width(2)))
                .map_err(err)?
                .label(m.mode.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Grouped bars: one group per hop, one bar per mode.
fn hop_bars(
    r: &DemoResults,
    caption: &str,
    y_desc: &str,
    value: impl Fn(&HopResult) -> f64,
) -> Result<String, String> {
    let names: Vec<String> = r
        .modes
        .first()
        .map(|m| m.hops.iter().map(|h| h.service.clone()).collect())
        .unwrap_or_default();
    let ymax = r
        .modes
        .iter()
        .flat_map(|m| m.hops.iter().map(&value))
        .fold(1.0, f64::max)
        * 1.15;
    let ymin = r
        .modes
        .iter()
        .flat_map(|m| m.hops.iter().map(&value))
        .fold(0.0, f64::min)
        * 1.15;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (860, 400)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let n = names.len().max(1);
        let mut chart = ChartBuilder::on(&root)
            .caption(caption, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(56)
            .build_cartesian_2d(0f64..n as f64, ymin..ymax)
            .map_err(err)?;
        let label_names = names.clone();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n * 2 + 1)
            .x_label_formatter(&move |x| {
                let frac = x - x.floor();
                if (frac - 0.5).abs() < 0.01 {
                    label_names.get(*x as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .x_label_style(("sans-serif", 11))
            .y_desc(y_desc)
            .draw()
            .map_err(err)?;
        let k = r.modes.len().max(1) as f64;
        for (mi, m) in r.modes.iter().enumerate() {
            let c = mode_color(m.mode);
            let bars: Vec<Rectangle<(f64, f64)>> = m
                .hops
                .iter()
                .enumerate()
                .map(|(i, h)| {
                    let x0 = i as f64 + 0.1 + 0.8 * mi as f64 / k;
                    let x1 = x0 + 0.8 / k;
                    Rectangle::new([(x0, 0.0), (x1, value(h))], c.filled())
                })
                .collect();
            chart
                .draw_series(bars)
                .map_err(err)?
                .label(m.mode.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Goodput against offered load, per mode.
fn sweep_chart(r: &DemoResults) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (720, 380)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let xmax = r.sweep.iter().map(|p| p.rate_per_s).fold(1.0, f64::max) * 1.05;
        let ymax = r
            .sweep
            .iter()
            .flat_map(|p| p.goodput_per_s.iter().map(|(_, g)| *g))
            .fold(1.0, f64::max)
            * 1.15;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "goodput against offered load (answers within budget)",
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(48)
            .build_cartesian_2d(0f64..xmax, 0f64..ymax)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("offered load (req/s)")
            .y_desc("goodput (req/s)")
            .draw()
            .map_err(err)?;
        let cap = r.capacity_per_s;
        chart
            .draw_series(LineSeries::new(
                vec![(cap, 0.0), (cap, ymax)],
                RGBColor(120, 120, 120).stroke_width(3),
            ))
            .map_err(err)?
            .label(format!("capacity {cap:.0} req/s ({})", r.bottleneck))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], RGBColor(120, 120, 120)));
        for m in &r.modes {
            let c = mode_color(m.mode);
            let pts: Vec<(f64, f64)> = r
                .sweep
                .iter()
                .filter_map(|p| {
                    p.goodput_per_s
                        .iter()
                        .find(|(mode, _)| *mode == m.mode)
                        .map(|(_, g)| (p.rate_per_s, *g))
                })
                .collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                .map_err(err)?
                .label(m.mode.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c));
            chart
                .draw_series(pts.into_iter().map(|p| Circle::new(p, 4, c.filled())))
                .map_err(err)?;
            let full: Vec<(f64, f64)> = r
                .sweep
                .iter()
                .filter_map(|p| {
                    p.full_goodput_per_s
                        .iter()
                        .find(|(mode, _)| *mode == m.mode)
                        .map(|(_, g)| (p.rate_per_s, *g))
                })
                .collect();
            chart
                .draw_series(LineSeries::new(full, c.mix(0.5).stroke_width(1)))
                .map_err(err)?
                .label(format!("{} (complete answers only)", m.mode.as_str()))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.mix(0.5)));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// A vertical marker on a histogram: where, what, and its colour.
struct Mark {
    at_ms: f64,
    label: String,
    colour: RGBColor,
}

/// A histogram per mode (step outlines on one axis, `bin_ms` wide bins), with vertical marks.
fn histogram_chart(
    r: &DemoResults,
    caption: &str,
    x_desc: &str,
    values: impl Fn(&super::ModeResult) -> &[f64],
    bin_ms: f64,
    marks: &[Mark],
) -> Result<String, String> {
    let xmax = r
        .modes
        .iter()
        .filter_map(|m| values(m).last().copied())
        .chain(marks.iter().map(|m| m.at_ms))
        .fold(bin_ms, f64::max)
        * 1.08;
    let bins = (xmax / bin_ms).ceil() as usize + 1;
    let counts: Vec<(Mode, Vec<u64>)> = r
        .modes
        .iter()
        .map(|m| {
            let mut c = vec![0u64; bins];
            for &v in values(m) {
                c[((v / bin_ms) as usize).min(bins - 1)] += 1;
            }
            (m.mode, c)
        })
        .collect();
    let ymax = counts
        .iter()
        .flat_map(|(_, c)| c.iter().copied())
        .max()
        .unwrap_or(1)
        .max(1) as f64
        * 1.15;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (860, 380)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(caption, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(52)
            .build_cartesian_2d(0f64..xmax, 0f64..ymax)
            .map_err(err)?;
        // No minor grid: with narrow bins it would hide the outlines.
        chart
            .configure_mesh()
            .light_line_style(WHITE)
            .x_desc(x_desc)
            .y_desc("requests")
            .draw()
            .map_err(err)?;
        for mark in marks {
            let c = mark.colour;
            chart
                .draw_series(LineSeries::new(
                    vec![(mark.at_ms, 0.0), (mark.at_ms, ymax)],
                    c.stroke_width(2),
                ))
                .map_err(err)?
                .label(mark.label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c));
        }
        for (mode, c) in &counts {
            let colour = mode_color(*mode);
            let mut pts = vec![(0.0, 0.0)];
            for (i, &n) in c.iter().enumerate() {
                let (x0, x1) = (i as f64 * bin_ms, (i + 1) as f64 * bin_ms);
                pts.push((x0, n as f64));
                pts.push((x1, n as f64));
            }
            pts.push((bins as f64 * bin_ms, 0.0));
            chart
                .draw_series(LineSeries::new(pts, colour.stroke_width(2)))
                .map_err(err)?
                .label(mode.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], colour));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

const GREY: RGBColor = RGBColor(120, 120, 120);
const DARK: RGBColor = RGBColor(40, 40, 40);

const STYLE: &str = "body{font-family:sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;\
color:#222}table.figures{border-collapse:collapse;margin:1em 0;font-size:14px}\
table.figures th,table.figures td{border:1px solid #ddd;padding:3px 8px}\
table.figures td{text-align:right;font-variant-numeric:tabular-nums}\
table.figures th{text-align:left;background:#f6f6f6;font-weight:normal}\
table.figures thead th{font-weight:bold;text-align:center}\
table.figures tr.sub th{padding-left:2em;color:#555}\
table.hops td{min-width:4em}table.hops td.mode{text-align:left;color:#555}figure{margin:1.5em 0}.legend span{margin-right:1.2em;\
font-size:13px}.finding{background:#fff4e5;padding:.5em 1em}ul.notes{font-size:13px;color:#444}";

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
