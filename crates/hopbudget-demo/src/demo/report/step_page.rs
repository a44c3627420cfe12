//! The step to overload as a page (`demo --step` writes it as `step.html`): for each step,
//! goodput and admitted p99 per 50 ms window of arrival, one line per mode, the step up and
//! the step down marked, drawn with plotters as the demo report's charts are.

use std::fmt::Write as _;

use plotters::prelude::*;

use super::charts::{DARK, GREY, err, mode_color};
use super::style::STYLE;
use crate::demo::step::measure::WINDOW;
use crate::demo::step::{self, StepRun};

/// Which series of a run a chart draws.
#[derive(Clone, Copy)]
enum Series {
    Goodput,
    AdmittedP99,
}

/// One chart of one step: `series` per window for each mode, the step marked.
fn chart(runs: &[&StepRun], series: Series) -> Result<String, String> {
    let Some(first) = runs.first() else {
        return Ok(String::new());
    };
    let window_s = WINDOW.as_secs_f64();
    let points = |r: &StepRun| -> Vec<(f64, f64)> {
        match series {
            Series::Goodput => r
                .goodput_per_window
                .iter()
                .enumerate()
                .map(|(i, &g)| (i as f64 * window_s, g))
                .collect(),
            Series::AdmittedP99 => r
                .admitted_p99_per_window
                .iter()
                .enumerate()
                .filter_map(|(i, p)| p.map(|p| (i as f64 * window_s, p)))
                .collect(),
        }
    };
    let budget = first.budget_ms as f64;
    let xmax = first.phase_s * 3.0;
    let ymax = runs
        .iter()
        .flat_map(|r| points(r).into_iter().map(|(_, y)| y))
        .chain(match series {
            Series::Goodput => [first.base_per_s * first.load_factor],
            Series::AdmittedP99 => [budget],
        })
        .fold(1.0, f64::max)
        * 1.1;
    let (caption, y_desc) = match series {
        Series::Goodput => (
            format!(
                "1x-{}x-1x: goodput per 50 ms window of arrival",
                first.load_factor
            ),
            "answers within budget per second",
        ),
        Series::AdmittedP99 => (
            format!(
                "1x-{}x-1x: admitted p99 per 50 ms window of arrival",
                first.load_factor
            ),
            "client latency p99 (ms)",
        ),
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 360)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(caption, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(0f64..xmax, 0f64..ymax)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("time since the first arrival (s)")
            .y_desc(y_desc)
            .draw()
            .map_err(err)?;
        // The step up and the step down.
        chart
            .draw_series(
                [first.phase_s, first.phase_s * 2.0]
                    .map(|x| PathElement::new(vec![(x, 0.0), (x, ymax)], DARK.stroke_width(2))),
            )
            .map_err(err)?
            .label(format!("step up to {}x, and down", first.load_factor))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], DARK));
        if let Series::AdmittedP99 = series {
            chart
                .draw_series(LineSeries::new(
                    vec![(0.0, budget), (xmax, budget)],
                    GREY.stroke_width(2),
                ))
                .map_err(err)?
                .label(format!("budget {} ms", first.budget_ms))
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], GREY));
        }
        for r in runs {
            let c = mode_color(r.mode);
            chart
                .draw_series(LineSeries::new(points(r), c.stroke_width(2)))
                .map_err(err)?
                .label(r.mode.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c));
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

/// The self-contained `step.html`: the figures as a table, then per step its two charts.
pub fn step_html(runs: &[StepRun]) -> Result<String, String> {
    let mut h = String::new();
    let _ = writeln!(
        h,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>hopbudget demo: a step to overload</title>\
         <style>{STYLE}</style></head><body>\n<h1>A step to overload (S22)</h1>"
    );
    if let Some(first) = runs.first() {
        let _ = writeln!(
            h,
            "<p>The checkout graph on loopback at its capacity ({:.0} requests per second), \
             then at once a multiple of it, then back, {:.0} s each, the same evenly spaced \
             arrivals in every mode; {} ms budgets. Each chart counts requests by the 50 ms \
             window they arrived in: goodput is the answers within the budget, per second; \
             admitted p99 is the p99 client latency of those not refused. The dark lines \
             mark the step up and the step down.</p>",
            first.base_per_s, first.phase_s, first.budget_ms
        );
    }
    h.push_str("<table class=\"figures\"><thead><tr>");
    for head in step::HEADS {
        let _ = write!(h, "<th>{head}</th>");
    }
    h.push_str("</tr></thead><tbody>\n");
    for row in step::rows(runs) {
        h.push_str("<tr>");
        for cell in row {
            let _ = write!(h, "<td>{cell}</td>");
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</tbody></table>\n");
    let mut factors: Vec<f64> = runs.iter().map(|r| r.load_factor).collect();
    factors.dedup();
    for factor in factors {
        let of: Vec<&StepRun> = runs.iter().filter(|r| r.load_factor == factor).collect();
        let _ = writeln!(
            h,
            "<h2 id=\"step-{factor}x\">1x-{factor}x-1x</h2>\n<figure class=\"step-goodput\">{}</figure>\n\
             <figure class=\"step-p99\">{}</figure>",
            chart(&of, Series::Goodput)?,
            chart(&of, Series::AdmittedP99)?
        );
    }
    h.push_str("</body></html>\n");
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::mode::Mode;
    use crate::demo::step::measure::StepFigures;

    fn run(mode: Mode, factor: f64) -> StepRun {
        StepRun {
            load_factor: factor,
            mode,
            base_per_s: 33.0,
            phase_s: 1.0,
            budget_ms: 500,
            figures: StepFigures::default(),
            goodput_per_window: vec![30.0; 60],
            admitted_p99_per_window: (0..60)
                .map(|i| (i % 7 != 0).then_some(100.0 + i as f64))
                .collect(),
            queued_per_window: vec![0; 60],
        }
    }

    #[test]
    fn the_page_has_both_charts_for_every_step_with_every_mode_and_the_step_marked() {
        let runs: Vec<StepRun> = [2.0, 3.0]
            .into_iter()
            .flat_map(|f| Mode::ALL.map(|m| run(m, f)))
            .collect();
        let page = step_html(&runs).unwrap();
        assert_eq!(
            page.matches("<svg").count(),
            4,
            "two charts for each of two steps"
        );
        for caption in [
            "1x-2x-1x: goodput per 50 ms window",
            "1x-2x-1x: admitted p99 per 50 ms window",
            "1x-3x-1x: goodput per 50 ms window",
            "1x-3x-1x: admitted p99 per 50 ms window",
        ] {
            assert!(page.contains(caption), "{caption}");
        }
        assert_eq!(page.matches("step up to 3x, and down").count(), 2);
        assert_eq!(page.matches("budget 500 ms").count(), 2);
        for m in Mode::ALL {
            // One legend entry per chart (plotters puts a text on a line of its own) and a
            // row of the table per step.
            let legend = format!("\n{}\n</text>", m.as_str());
            assert_eq!(page.matches(&legend).count(), 4, "{m:?}");
            assert_eq!(page.matches(&format!("<td>{}</td>", m.as_str())).count(), 2);
        }
        assert_eq!(
            page.matches("<tr>").count(),
            1 + runs.len(),
            "the figures table"
        );
    }
}
