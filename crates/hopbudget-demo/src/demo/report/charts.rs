//! The report's inline SVG charts, drawn with plotters: client latency per mode, per-hop bars,
//! goodput against offered load, and histograms with marks. One colour per mode in all.

use plotters::prelude::*;

use crate::demo::mode::Mode;
use crate::demo::results::DemoResults;
use crate::demo::results::HopResult;

/// One colour per mode, the same in every chart.
pub(super) fn mode_color(mode: Mode) -> RGBColor {
    match mode {
        Mode::Detached => RGBColor(178, 24, 43),
        Mode::Timeouts => RGBColor(230, 145, 56),
        Mode::Propagated => RGBColor(67, 147, 195),
    }
}

pub(super) fn err(e: impl std::fmt::Display) -> String {
    format!("chart: {e}")
}

/// Latency distribution per mode: the CDF of client latency.
pub(super) fn latency_chart(r: &DemoResults) -> Result<String, String> {
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
pub(super) fn hop_bars(
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
pub(super) fn sweep_chart(r: &DemoResults) -> Result<String, String> {
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
pub(super) struct Mark {
    /// Where, in ms.
    pub(super) at_ms: f64,
    /// What it marks.
    pub(super) label: String,
    /// Its colour.
    pub(super) colour: RGBColor,
}

/// A histogram per mode (step outlines on one axis, `bin_ms` wide bins), with vertical marks.
pub(super) fn histogram_chart(
    r: &DemoResults,
    caption: &str,
    x_desc: &str,
    values: impl Fn(&crate::demo::results::ModeResult) -> &[f64],
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

pub(super) const GREY: RGBColor = RGBColor(120, 120, 120);
pub(super) const DARK: RGBColor = RGBColor(40, 40, 40);
