//! The demo's output: the side-by-side table printed on the terminal, a self-contained HTML
//! report with inline SVG charts (plotters), and the JSON results.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::DemoResults;
use super::mode::Mode;
use super::results::{HopResult, ModeResult};

fn cell(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

type Row = Box<dyn Fn(&ModeResult) -> String>;

/// The side-by-side table.
pub fn table(r: &DemoResults) -> String {
    let mut out = String::new();
    let first = r.modes.first();
    let _ = writeln!(
        out,
        "hopbudget demo: checkout call graph (S7), {} req/s for {} s per mode",
        first.map_or(0.0, |m| m.rate_per_s),
        first.map_or(0.0, |m| m.duration_s)
    );
    let _ = writeln!(
        out,
        "client budget {} ms, client timeout {} ms; capacity {:.0} req/s (bottleneck: {})",
        r.budget_ms, r.client_timeout_ms, r.capacity_per_s, r.bottleneck
    );
    if let Some(f) = first.and_then(|m| m.forgetful.as_ref()) {
        let _ = writeln!(
            out,
            "--forgetful {f}: it ignores inbound deadlines in propagated mode (S13)"
        );
    }
    let _ = writeln!(out);
    let _ = write!(out, "{:<44}", "");
    for m in &r.modes {
        let _ = write!(out, "{:>12}", m.mode.as_str());
    }
    let _ = writeln!(out);
    let rows: Vec<(&str, Row)> = vec![
        ("requests", Box::new(|m| m.requests.to_string())),
        (
            "client latency p50 (ms)",
            Box::new(|m| cell(m.client_latency_ms.p50)),
        ),
        (
            "client latency p99 (ms)",
            Box::new(|m| cell(m.client_latency_ms.p99)),
        ),
        (
            "client latency p99.9 (ms)",
            Box::new(|m| cell(m.client_latency_ms.p999)),
        ),
        (
            "client latency max (ms)",
            Box::new(|m| cell(m.client_latency_ms.max)),
        ),
        (
            "over budget (%)",
            Box::new(|m| format!("{:.1}", m.over_budget_pct)),
        ),
        (
            "goodput (ok within budget, req/s)",
            Box::new(|m| format!("{:.1}", m.goodput_per_s)),
        ),
        (
            "  of which complete (with reco), req/s",
            Box::new(|m| format!("{:.1}", m.full_goodput_per_s)),
        ),
        (
            "answers degraded (no reco)",
            Box::new(|m| m.degraded.to_string()),
        ),
        ("client gave up", Box::new(|m| m.gave_up.to_string())),
        (
            "edge hop duration p99.9 (ms)",
            Box::new(|m| cell(m.edge_latency_ms.p999)),
        ),
        (
            "edge hop duration max (ms)",
            Box::new(|m| cell(m.edge_latency_ms.max)),
        ),
        (
            "own work done (ms)",
            Box::new(|m| format!("{:.0}", m.work_ms)),
        ),
        (
            "work after the client gave up (ms)",
            Box::new(|m| format!("{:.0}", m.work_after_give_up_ms)),
        ),
    ];
    for (name, f) in &rows {
        let _ = write!(out, "{name:<44}");
        for m in &r.modes {
            let _ = write!(out, "{:>12}", f(m));
        }
        let _ = writeln!(out);
    }
    if let (Some(t), Some(p)) = (r.mode(Mode::Timeouts), r.mode(Mode::Propagated))
        && t.work_after_give_up_ms > 0.0
    {
        let _ = writeln!(
            out,
            "{:<44}{:>24}",
            "  propagated / timeouts",
            format!(
                "{:.2}%",
                100.0 * p.work_after_give_up_ms / t.work_after_give_up_ms
            )
        );
    }
    let background: Vec<(&str, Row)> = vec![
        (
            "confirmation e-mails sent / scheduled (S11)",
            Box::new(|m| format!("{}/{}", m.background.sent, m.background.scheduled)),
        ),
        (
            "  sent after the answer went out",
            Box::new(|m| m.background.sent_after_answer.to_string()),
        ),
    ];
    for (name, f) in &background {
        let _ = write!(out, "{name:<44}");
        for m in &r.modes {
            let _ = write!(out, "{:>12}", f(m));
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(out);
    let modes: Vec<&str> = r.modes.iter().map(|m| &m.mode.as_str()[..1]).collect();
    let pair = modes.join("/");
    let _ = writeln!(
        out,
        "{:<23}{:>22}{:>15}{:>15}{:>15}{:>18}",
        "per hop",
        format!("budget at arrival {pair}"),
        format!("refused {pair}"),
        format!("expired {pair}"),
        format!("cancelled {pair}"),
        format!("late work ms {pair}"),
    );
    let hop_names: Vec<String> = r
        .modes
        .first()
        .map(|m| m.hops.iter().map(|h| h.service.clone()).collect())
        .unwrap_or_default();
    for (i, name) in hop_names.iter().enumerate() {
        let hop = |m: &ModeResult| m.hops.get(i).cloned().unwrap_or_default();
        let join = |f: &dyn Fn(&HopResult) -> String| {
            r.modes
                .iter()
                .map(|m| f(&hop(m)))
                .collect::<Vec<_>>()
                .join("/")
        };
        let _ = writeln!(
            out,
            "{:<23}{:>22}{:>15}{:>15}{:>15}{:>18}",
            name,
            join(&|h| h
                .budget_at_arrival_p50_ms
                .map_or("-".into(), |v| v.to_string())),
            join(&|h| h.refused.to_string()),
            join(&|h| h.expired.to_string()),
            join(&|h| h.cancelled.to_string()),
            join(&|h| format!("{:.0}", h.work_after_give_up_ms)),
        );
    }
    let _ = writeln!(
        out,
        "\nbudget at arrival: median ms left of the client's {} ms when the request reached the hop;\n\
         in timeouts mode the hop does not know it (it only has its own fresh timeout).\n\
         refused / expired: how calls to the hop ended, as its caller saw them (the client for\n\
         the edge); in timeouts mode expired means a per-hop timeout fired, there or below.\n\
         cancelled: the hop's caller went away while budget remained.\n\
         late work: the hop's own work done after the client had stopped waiting.",
        r.budget_ms
    );
    let cut: u64 = r.modes.iter().map(|m| m.work_cut_off).sum();
    if cut > 0 {
        let _ = writeln!(
            out,
            "{cut} pieces of work were still running when the drain limit stopped the run; \
             the work figures count them up to that moment, so they are lower bounds."
        );
    }
    for m in &r.modes {
        for o in &m.over_shrunk {
            let _ = writeln!(
                out,
                "\n{}: entry budget too small for this chain depth (S6): {:.0}% of calls to \
                 {} (depth {}) were refused before work. It needs {} ms and got {} ms \
                 (median); the chain above it spends about {} ms, so an entry budget of \
                 about {} ms would let it start. The leaf is not failing; the budget is.",
                m.mode.as_str(),
                o.refused_pct,
                o.leaf,
                o.depth,
                o.needs_ms,
                o.budget_at_arrival_ms,
                o.entry_budget_needed_ms - o.needs_ms as i64,
                o.entry_budget_needed_ms
            );
        }
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

const COLORS: [RGBColor; 2] = [RGBColor(214, 96, 77), RGBColor(67, 147, 195)];

fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
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
        for (i, m) in r.modes.iter().enumerate() {
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
            let c = color(i);
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
            let c = color(mi);
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
        for (mi, m) in r.modes.iter().enumerate() {
            let c = color(mi);
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

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The self-contained HTML report.
pub fn html(r: &DemoResults) -> Result<String, String> {
    let mut h = String::new();
    h.push_str(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>hopbudget demo: per-hop timeouts vs propagated deadlines</title>\
         <style>body{font-family:sans-serif;max-width:960px;margin:2em auto;padding:0 1em}\
         pre{background:#f6f6f6;padding:1em;overflow-x:auto;font-size:13px}\
         figure{margin:1.5em 0}</style></head><body>\n",
    );
    let _ = writeln!(
        h,
        "<h1>hopbudget demo</h1>\n<p>The checkout call graph of scenario S7, run twice over \
         the same seeded arrival schedule: with a fresh timeout at every hop, and with one \
         propagated deadline. Client budget {} ms, client timeout {} ms.</p>",
        r.budget_ms, r.client_timeout_ms
    );
    let _ = writeln!(h, "<h2>Side by side</h2>\n<pre>{}</pre>", escape(&table(r)));
    let _ = writeln!(
        h,
        "<h2>Latency distribution per mode</h2><figure>{}</figure>",
        latency_chart(r)?
    );
    let _ = writeln!(
        h,
        "<h2>Budget waterfall per hop</h2><p>Median budget left when the request reached each \
         hop. In timeouts mode the hop does not know this number.</p><figure>{}</figure>",
        hop_bars(r, "budget left at arrival (median)", "ms", |x| x
            .budget_at_arrival_p50_ms
            .unwrap_or(0)
            as f64)?
    );
    let _ = writeln!(
        h,
        "<h2>Refusals per hop</h2><figure>{}</figure>",
        hop_bars(r, "refused before work (C3)", "requests", |x| x.refused
            as f64)?
    );
    let _ = writeln!(
        h,
        "<h2>Work after the client gave up, per hop</h2><figure>{}</figure>",
        hop_bars(r, "own work after the client stopped waiting", "ms", |x| x
            .work_after_give_up_ms)?
    );
    if !r.sweep.is_empty() {
        let _ = writeln!(
            h,
            "<h2>Load sweep</h2><p>Offered load from 0.5x to 3x the graph's capacity (its \
             bottleneck's): the budgeted graph degrades rather than collapses. Goodput counts \
             answers within the budget, degraded ones (no recommendations) included; the thin \
             lines count complete answers only.</p><figure>{}</figure>",
            sweep_chart(r)?
        );
    }
    h.push_str("</body></html>\n");
    Ok(h)
}
