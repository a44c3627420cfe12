//! The page's charts, drawn with plotters as inline SVG: each service's durations with a
//! spike at a default timeout marked, and the work each service did for nobody.

use plotters::prelude::*;

use super::escape::esc;
use super::tag;
use crate::audit::report::pictures::ServicePicture;

/// The bars of a histogram.
const BAR: RGBColor = RGBColor(67, 147, 195);
/// The line at a spike: a default timeout firing.
pub(super) const SPIKE: RGBColor = RGBColor(215, 25, 28);
/// The bars of work for nobody.
const NOBODY: RGBColor = RGBColor(140, 86, 75);
/// Bins of a histogram.
const BINS: u64 = 60;

fn err(e: impl std::fmt::Display) -> String {
    format!("chart: {e}")
}

/// One service's durations, binned evenly from 0 to a little past the longest, with a red
/// line and its value at each spike. The spike's line is the only `<polyline>` drawn in the
/// spike's red, so it is given `class="spike"` for a reader to find.
pub(super) fn durations(s: &ServicePicture) -> Result<String, String> {
    let longest = s.durations.last().map_or(1, |(v, _)| *v);
    let top = (longest.max(s.spikes_ms.iter().copied().max().unwrap_or(0)) as f64 * 1.08)
        .max(10.0)
        .ceil() as u64;
    let width = top.div_ceil(BINS).max(1);
    let mut bins = vec![0u64; (top / width + 1) as usize];
    let last = bins.len() - 1;
    for (v, c) in &s.durations {
        bins[((*v / width) as usize).min(last)] += c;
    }
    let ymax = bins.iter().copied().max().unwrap_or(1).max(1) as f64 * 1.15;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (440, 240)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(&s.service, ("sans-serif", 15))
            .margin(8)
            .x_label_area_size(32)
            .y_label_area_size(44)
            .build_cartesian_2d(0f64..(bins.len() as u64 * width) as f64, 0f64..ymax)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc("duration (ms)")
            .y_desc("requests")
            .x_labels(6)
            .y_labels(4)
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| format!("{v:.0}"))
            .label_style(("sans-serif", 11))
            .draw()
            .map_err(err)?;
        chart
            .draw_series(
                bins.iter()
                    .enumerate()
                    .filter(|(_, c)| **c > 0)
                    .map(|(i, c)| {
                        let x0 = (i as u64 * width) as f64;
                        Rectangle::new([(x0, 0.0), (x0 + width as f64, *c as f64)], BAR.filled())
                    }),
            )
            .map_err(err)?;
        for &v in &s.spikes_ms {
            let x = v as f64 + width as f64 / 2.0;
            chart
                .draw_series(LineSeries::new(
                    vec![(x, 0.0), (x, ymax)],
                    SPIKE.stroke_width(2),
                ))
                .map_err(err)?;
            chart
                .draw_series(std::iter::once(Text::new(
                    format!("{v} ms"),
                    (x, ymax * 0.97),
                    ("sans-serif", 12).into_font().color(&SPIKE),
                )))
                .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    let spike = format!("stroke=\"#{:02X}{:02X}{:02X}\"", SPIKE.0, SPIKE.1, SPIKE.2);
    let svg = svg.replace(
        &format!("<polyline fill=\"none\" opacity=\"1\" {spike}"),
        &format!("<polyline class=\"spike\" fill=\"none\" opacity=\"1\" {spike}"),
    );
    Ok(tag::root(&svg, "class=\"histogram\""))
}

/// Work for nobody per service: one bar each (seconds, summed), named by `data-service`.
pub(super) fn nobody(services: &[ServicePicture]) -> Result<String, String> {
    let names: Vec<&str> = services.iter().map(|s| s.service.as_str()).collect();
    let n = names.len().max(1);
    let ymax = services
        .iter()
        .map(|s| s.for_nobody_ms as f64 / 1000.0)
        .fold(0.001, f64::max)
        * 1.15;
    let mut svg = String::new();
    {
        let root =
            SVGBackend::with_string(&mut svg, ((120 * n as u32).max(520), 300)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption("work for nobody, per service", ("sans-serif", 15))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(56)
            .build_cartesian_2d(0f64..n as f64, 0f64..ymax)
            .map_err(err)?;
        let label_names: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
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
            .y_desc("seconds after the caller gave up (summed)")
            .draw()
            .map_err(err)?;
        chart
            .draw_series(services.iter().enumerate().map(|(i, s)| {
                let x0 = i as f64 + 0.2;
                Rectangle::new(
                    [(x0, 0.0), (x0 + 0.6, s.for_nobody_ms as f64 / 1000.0)],
                    NOBODY.filled(),
                )
            }))
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    let attrs: Vec<String> = services
        .iter()
        .map(|s| {
            format!(
                "class=\"nobody-bar\" data-service=\"{}\" data-ms=\"{}\" data-calls=\"{}\"",
                esc(&s.service),
                s.for_nobody_ms,
                s.for_nobody_calls
            )
        })
        .collect();
    Ok(tag::root(
        &tag::rects(&svg, NOBODY, &attrs),
        "class=\"nobody-bars\"",
    ))
}
