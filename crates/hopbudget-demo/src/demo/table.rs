//! The side-by-side figures as rows, once, and the two ways they are shown: the text table
//! printed on the terminal (and in `table.txt`) and the HTML table of the report.

use std::fmt::Write as _;

use super::mode::Mode;
use super::results::DemoResults;
use super::results::{HopResult, ModeResult};

fn cell(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

type Figure = fn(&ModeResult) -> String;

/// The per-mode rows: a name and one figure per mode.
const SUMMARY: &[(&str, Figure)] = &[
    ("requests", |m| m.requests.to_string()),
    ("client latency p50 (ms)", |m| cell(m.client_latency_ms.p50)),
    ("client latency p99 (ms)", |m| cell(m.client_latency_ms.p99)),
    ("client latency p99.9 (ms)", |m| {
        cell(m.client_latency_ms.p999)
    }),
    ("client latency max (ms)", |m| cell(m.client_latency_ms.max)),
    ("over budget (%)", |m| format!("{:.1}", m.over_budget_pct)),
    ("goodput (ok within budget, req/s)", |m| {
        format!("{:.1}", m.goodput_per_s)
    }),
    ("  of which complete (model reco), req/s", |m| {
        format!("{:.1}", m.full_goodput_per_s)
    }),
    ("answers degraded (precomputed/no reco)", |m| {
        m.degraded.to_string()
    }),
    ("client gave up", |m| m.gave_up.to_string()),
    ("edge hop duration p99.9 (ms)", |m| {
        cell(m.edge_latency_ms.p999)
    }),
    ("edge hop duration max (ms)", |m| {
        cell(m.edge_latency_ms.max)
    }),
    ("own work done (ms)", |m| format!("{:.0}", m.work_ms)),
    ("work after the client gave up (ms)", |m| {
        format!("{:.0}", m.work_after_give_up_ms)
    }),
    ("confirmation e-mails sent / scheduled (S11)", |m| {
        format!("{}/{}", m.background.sent, m.background.scheduled)
    }),
    ("  sent after the answer went out", |m| {
        m.background.sent_after_answer.to_string()
    }),
];

type HopFigure = fn(&HopResult) -> String;

/// The per-hop columns: a name and one figure per hop and mode.
const PER_HOP: &[(&str, HopFigure)] = &[
    ("budget at arrival", |h| {
        h.budget_at_arrival_p50_ms
            .map_or("-".into(), |v| v.to_string())
    }),
    ("refused", |h| h.refused.to_string()),
    ("expired", |h| h.expired.to_string()),
    ("cancelled", |h| h.cancelled.to_string()),
    ("late work ms", |h| {
        format!("{:.0}", h.work_after_give_up_ms)
    }),
];

/// What the columns mean, under both tables.
pub fn notes(r: &DemoResults) -> Vec<String> {
    let mut notes = vec![
        format!(
            "budget at arrival: median ms left of the client's {} ms when the request reached \
             the hop; in detached and timeouts mode the hop does not know it (it only has its \
             own fresh timeout).",
            r.budget_ms
        ),
        "refused / expired: how calls to the hop ended, as its caller saw them (the client for \
         the edge); without a budget, expired means a per-hop timeout fired, there or below."
            .into(),
        "cancelled: the hop's caller went away (budget left, or no budget at all).".into(),
        "late work: the hop's own work done after the client had stopped waiting.".into(),
    ];
    let cut: u64 = r.modes.iter().map(|m| m.work_cut_off).sum();
    if cut > 0 {
        notes.push(format!(
            "{cut} pieces of work were still running when the drain limit stopped the run; the \
             work figures count them up to that moment, so they are lower bounds."
        ));
    }
    notes
}

/// What the run found beyond the figures: leaves refused for want of budget (S6).
pub fn findings(r: &DemoResults) -> Vec<String> {
    let mut notes = Vec::new();
    for m in &r.modes {
        for o in &m.over_shrunk {
            notes.push(format!(
                "{}: entry budget too small for this chain depth (S6): {:.0}% of calls to {} \
                 (depth {}) were refused before work. It needs {} ms and got {} ms (median); \
                 the chain above it spends about {} ms, so an entry budget of about {} ms \
                 would let it start. The leaf is not failing; the budget is.",
                m.mode.as_str(),
                o.refused_pct,
                o.leaf,
                o.depth,
                o.needs_ms,
                o.budget_at_arrival_ms,
                o.entry_budget_needed_ms - o.needs_ms as i64,
                o.entry_budget_needed_ms
            ));
        }
    }
    notes
}

/// The lines above the table.
pub fn heading(r: &DemoResults) -> Vec<String> {
    let first = r.modes.first();
    let mut out = vec![
        format!(
            "hopbudget demo: checkout call graph (S7), {} req/s for {} s per mode",
            first.map_or(0.0, |m| m.rate_per_s),
            first.map_or(0.0, |m| m.duration_s)
        ),
        format!(
            "client budget {} ms, client timeout {} ms; capacity {:.0} req/s (bottleneck: {})",
            r.budget_ms, r.client_timeout_ms, r.capacity_per_s, r.bottleneck
        ),
    ];
    if let Some(f) = first.and_then(|m| m.forgetful.as_ref()) {
        out.push(format!(
            "--forgetful {f}: it ignores inbound deadlines in propagated mode (S13)"
        ));
    }
    out
}

/// Late work of the propagated run as a share of each baseline's.
fn late_work_shares(r: &DemoResults) -> Vec<(Mode, f64)> {
    let Some(p) = r.mode(Mode::Propagated) else {
        return Vec::new();
    };
    r.modes
        .iter()
        .filter(|m| m.mode != Mode::Propagated && m.work_after_give_up_ms > 0.0)
        .map(|m| {
            (
                m.mode,
                100.0 * p.work_after_give_up_ms / m.work_after_give_up_ms,
            )
        })
        .collect()
}

fn hop_names(r: &DemoResults) -> Vec<String> {
    r.modes
        .first()
        .map(|m| m.hops.iter().map(|h| h.service.clone()).collect())
        .unwrap_or_default()
}

fn hop_cell(r: &DemoResults, i: usize, f: HopFigure) -> String {
    r.modes
        .iter()
        .map(|m| f(&m.hops.get(i).cloned().unwrap_or_default()))
        .collect::<Vec<_>>()
        .join("/")
}

/// The side-by-side table as text.
pub fn text(r: &DemoResults) -> String {
    let mut out = String::new();
    for line in heading(r) {
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out);
    let _ = write!(out, "{:<44}", "");
    for m in &r.modes {
        let _ = write!(out, "{:>12}", m.mode.as_str());
    }
    let _ = writeln!(out);
    for (name, f) in SUMMARY {
        let _ = write!(out, "{name:<44}");
        for m in &r.modes {
            let _ = write!(out, "{:>12}", f(m));
        }
        let _ = writeln!(out);
        if name.starts_with("work after") {
            for (mode, pct) in late_work_shares(r) {
                let _ = writeln!(
                    out,
                    "{:<44}{:>w$}",
                    format!("  propagated / {mode}"),
                    format!("{pct:.2}%"),
                    w = 12 * r.modes.len()
                );
            }
        }
    }
    let _ = writeln!(out);
    let pair = r
        .modes
        .iter()
        .map(|m| &m.mode.as_str()[..1])
        .collect::<Vec<_>>()
        .join("/");
    let _ = write!(out, "{:<23}", "per hop");
    for (name, _) in PER_HOP {
        let _ = write!(out, "{:>w$}", format!("{name} {pair}"), w = col_width(name));
    }
    let _ = writeln!(out);
    for (i, name) in hop_names(r).iter().enumerate() {
        let _ = write!(out, "{name:<23}");
        for (col, f) in PER_HOP {
            let _ = write!(out, "{:>w$}", hop_cell(r, i, *f), w = col_width(col));
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(out);
    for note in notes(r) {
        let _ = writeln!(out, "{}", wrap(&note, 92));
    }
    for finding in findings(r) {
        let _ = writeln!(out, "\n{finding}");
    }
    out
}

fn col_width(name: &str) -> usize {
    (name.len() + 8).max(19)
}

fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = 0;
    for word in text.split_whitespace() {
        if line > 0 && line + 1 + word.len() > width {
            out.push('\n');
            line = 0;
        } else if line > 0 {
            out.push(' ');
            line += 1;
        }
        out.push_str(word);
        line += word.len();
    }
    out
}

/// Escape text for HTML.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The side-by-side table as HTML tables: the summary, then the per-hop figures.
pub fn html(r: &DemoResults) -> String {
    let mut h = String::new();
    for line in heading(r) {
        let _ = writeln!(h, "<p>{}</p>", escape(&line));
    }
    h.push_str("<table class=\"figures\"><thead><tr><th></th>");
    for m in &r.modes {
        let _ = write!(h, "<th>{}</th>", m.mode.as_str());
    }
    h.push_str("</tr></thead><tbody>\n");
    for (name, f) in SUMMARY {
        let class = if name.starts_with("  ") {
            " class=\"sub\""
        } else {
            ""
        };
        let _ = write!(h, "<tr{class}><th>{}</th>", escape(name.trim()));
        for m in &r.modes {
            let _ = write!(h, "<td>{}</td>", escape(&f(m)));
        }
        h.push_str("</tr>\n");
        if name.starts_with("work after") {
            for (mode, pct) in late_work_shares(r) {
                let _ = writeln!(
                    h,
                    "<tr class=\"sub\"><th>propagated / {mode}</th><td colspan=\"{}\">{pct:.2}%</td></tr>",
                    r.modes.len()
                );
            }
        }
    }
    h.push_str("</tbody></table>\n");
    // Per hop, one row per mode: the hop names stay readable and the table stays narrow.
    h.push_str("<table class=\"figures hops\"><thead><tr><th>per hop</th><th>mode</th>");
    for (name, _) in PER_HOP {
        let _ = write!(h, "<th>{}</th>", escape(name));
    }
    h.push_str("</tr></thead><tbody>\n");
    for (i, name) in hop_names(r).iter().enumerate() {
        for (k, m) in r.modes.iter().enumerate() {
            h.push_str("<tr>");
            if k == 0 {
                let _ = write!(h, "<th rowspan=\"{}\">{}</th>", r.modes.len(), escape(name));
            }
            let _ = write!(h, "<td class=\"mode\">{}</td>", m.mode.as_str());
            let hop = m.hops.get(i).cloned().unwrap_or_default();
            for (_, f) in PER_HOP {
                let _ = write!(h, "<td>{}</td>", escape(&f(&hop)));
            }
            h.push_str("</tr>\n");
        }
    }
    h.push_str("</tbody></table>\n");
    for finding in findings(r) {
        let _ = writeln!(h, "<p class=\"finding\">{}</p>", escape(&finding));
    }
    h.push_str("<ul class=\"notes\">");
    for note in notes(r) {
        let _ = write!(h, "<li>{}</li>", escape(&note));
    }
    h.push_str("</ul>\n");
    h
}
