//! One request drawn as a timeline per mode (an SVG waterfall): every hop it reached as a bar
//! from arrival to terminal status, its own work inside it, the client's budget and the
//! moment the client stopped waiting as vertical lines, and the work done after that moment
//! in red. All modes share one time axis so the panels compare at a glance.

use std::fmt::Write as _;

use hopbudget::Outcome;

use super::results::DemoResults;
use super::results::Timeline;
use super::table::escape;

const WIDTH: f64 = 960.0;
const LABEL: f64 = 250.0;
const ROW: f64 = 22.0;
const TOP: f64 = 34.0;
const BOTTOM: f64 = 30.0;

fn outcome_colour(o: Outcome) -> &'static str {
    match o {
        Outcome::Completed => "#7fbf7f",
        Outcome::Refused => "#e6a23c",
        Outcome::Expired => "#d6604d",
        Outcome::Cancelled => "#9e9e9e",
    }
}

/// The time axis end shared by every panel, ms.
fn axis_end(r: &DemoResults) -> f64 {
    r.modes
        .iter()
        .filter_map(|m| m.timeline.as_ref())
        .flat_map(|t| {
            t.hops
                .iter()
                .map(|h| h.end_ms)
                .chain(std::iter::once(t.client_end_ms))
        })
        .filter(|v| v.is_finite())
        .fold(r.client_timeout_ms as f64, f64::max)
        * 1.05
}

/// A round tick step for an axis `end` ms long.
fn tick_step(end: f64) -> f64 {
    [
        50.0, 100.0, 200.0, 250.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0,
    ]
    .into_iter()
    .find(|s| end / s <= 10.0)
    .unwrap_or(20000.0)
}

/// One SVG panel for one mode's timeline.
fn panel(r: &DemoResults, mode: &str, t: &Timeline, end: f64) -> String {
    let rows = t.hops.len().max(1) as f64;
    let height = TOP + rows * ROW + BOTTOM;
    let x = |ms: f64| LABEL + (ms.max(0.0) / end) * (WIDTH - LABEL - 10.0);
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"12\" role=\"img\" \
         aria-label=\"{mode}: request {} through the graph\">",
        t.request_id
    );
    let _ = write!(
        s,
        "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\
         <text x=\"4\" y=\"16\" font-size=\"14\" font-weight=\"bold\">{mode}</text>\
         <text x=\"{LABEL}\" y=\"16\" fill=\"#444\">request {}: {}</text>",
        t.request_id,
        escape(&client_story(t))
    );
    let axis_y = TOP + rows * ROW + 4.0;
    let step = tick_step(end);
    let mut tick = 0.0;
    while tick <= end {
        let _ = write!(
            s,
            "<line x1=\"{0:.1}\" y1=\"{TOP}\" x2=\"{0:.1}\" y2=\"{axis_y}\" stroke=\"#eee\"/>\
             <text x=\"{0:.1}\" y=\"{1:.1}\" text-anchor=\"middle\" fill=\"#666\">{2}</text>",
            x(tick),
            axis_y + 14.0,
            tick as u64
        );
        tick += step;
    }
    let _ = write!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#666\">ms after the client sent it</text>",
        WIDTH - 10.0,
        axis_y + 26.0
    );
    for (i, h) in t.hops.iter().enumerate() {
        let y = TOP + i as f64 * ROW;
        let label = match h.remaining_ms {
            Some(ms) => format!("{} ({ms} ms left)", h.service),
            None => h.service.clone(),
        };
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            LABEL - 6.0,
            y + 15.0,
            escape(&label)
        );
        let (x0, x1) = (x(h.start_ms), x(h.end_ms).max(x(h.start_ms) + 1.0));
        let _ = write!(
            s,
            "<rect x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\" \
             fill-opacity=\"0.45\"><title>{}: {} at {:.0} ms</title></rect>",
            y + 3.0,
            x1 - x0,
            ROW - 6.0,
            outcome_colour(h.outcome),
            escape(&h.service),
            h.outcome,
            h.end_ms
        );
        for &(w0, w1) in &h.work_ms {
            // Work before the client stopped waiting in dark blue, after it in red.
            let cut = if t.client_end_ms.is_finite() {
                t.client_end_ms
            } else {
                f64::INFINITY
            };
            let parts = [(w0, w1.min(cut), "#2b5d8a"), (w0.max(cut), w1, "#c0392b")];
            for (a, b, colour) in parts {
                if b > a {
                    let _ = write!(
                        s,
                        "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{colour}\"/>",
                        x(a),
                        y + 7.0,
                        (x(b) - x(a)).max(1.0),
                        ROW - 14.0
                    );
                }
            }
        }
    }
    let budget = r.budget_ms as f64;
    let _ = write!(
        s,
        "<line x1=\"{0:.1}\" y1=\"{1}\" x2=\"{0:.1}\" y2=\"{2:.1}\" stroke=\"#555\" \
         stroke-dasharray=\"2 3\"/><text x=\"{0:.1}\" y=\"{3}\" fill=\"#555\" \
         text-anchor=\"middle\">budget {4} ms</text>",
        x(budget),
        TOP - 4.0,
        axis_y,
        TOP - 6.0,
        r.budget_ms
    );
    if t.client_end_ms.is_finite() {
        let (colour, what) = if t.gave_up {
            ("#c0392b", "client gave up")
        } else if t.ok && t.client_end_ms > budget {
            ("#e69138", "client answered, late")
        } else if t.ok {
            ("#27ae60", "client answered")
        } else {
            ("#c0392b", "client got an error")
        };
        let _ = write!(
            s,
            "<line x1=\"{0:.1}\" y1=\"{1}\" x2=\"{0:.1}\" y2=\"{2:.1}\" stroke=\"{colour}\" \
             stroke-width=\"2\"/><text x=\"{3:.1}\" y=\"{4}\" fill=\"{colour}\">{what}</text>",
            x(t.client_end_ms),
            TOP - 4.0,
            axis_y,
            x(t.client_end_ms) + 4.0,
            TOP + 10.0
        );
    }
    s.push_str("</svg>");
    s
}

fn client_story(t: &Timeline) -> String {
    let when = t.client_end_ms;
    if t.gave_up {
        format!("the client gave up at {when:.0} ms")
    } else if t.ok {
        format!("answered at {when:.0} ms")
    } else {
        format!("the client got an error at {when:.0} ms")
    }
}

/// The timelines of every mode, one SVG each, on a shared time axis; empty when no request
/// was picked.
pub fn svg(r: &DemoResults) -> Vec<(String, String)> {
    let end = axis_end(r);
    r.modes
        .iter()
        .filter_map(|m| {
            let t = m.timeline.as_ref()?;
            Some((
                m.mode.as_str().to_owned(),
                panel(r, m.mode.as_str(), t, end),
            ))
        })
        .collect()
}

/// The legend shared by the panels, as HTML.
pub fn legend() -> String {
    let item = |colour: &str, opacity: f64, text: &str| {
        format!(
            "<span><svg width=\"14\" height=\"10\"><rect width=\"14\" height=\"10\" \
             fill=\"{colour}\" fill-opacity=\"{opacity}\"/></svg> {text}</span>"
        )
    };
    [
        item("#2b5d8a", 1.0, "own work while the client waited"),
        item("#c0392b", 1.0, "own work after the client stopped waiting"),
        item(outcome_colour(Outcome::Completed), 0.45, "hop completed"),
        item(outcome_colour(Outcome::Expired), 0.45, "hop expired"),
        item(outcome_colour(Outcome::Cancelled), 0.45, "hop cancelled"),
        item(outcome_colour(Outcome::Refused), 0.45, "hop refused"),
    ]
    .join(" ")
}
