//! The report for people (a plain-text table, an HTML page with the hop tree) and for
//! machines (JSON, the [`Report`] as it is).

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use super::report::{Report, Severity};

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn severity(s: Severity) -> &'static str {
    match s {
        Severity::Error => "ERROR",
        Severity::Warning => "warn",
        Severity::Info => "info",
    }
}

/// The plain-text report: summary, findings, per-hop table, refusals by depth, problems.
pub fn table(r: &Report) -> String {
    let mut out = String::new();
    let source = if r.input.requests > 0 {
        format!("{} OTLP/HTTP export requests", r.input.requests)
    } else {
        format!("{} lines of {} file(s)", r.input.lines, r.input.files)
    };
    let _ = writeln!(
        out,
        "read {} spans ({} hop spans) in {} traces from {source}; {} complete, {} partial",
        r.input.spans,
        r.traces.hop_spans,
        r.traces.complete + r.traces.partial,
        r.traces.complete,
        r.traces.partial
    );
    if r.grouping.evicted + r.grouping.late_spans > 0 {
        let _ = writeln!(
            out,
            "grouping: {} traces finished early to bound memory, {} spans arrived after \
             their trace was finished (raise --settle-spans or --max-open-spans)",
            r.grouping.evicted, r.grouping.late_spans
        );
    }
    if r.input.base64_ids > 0 {
        let _ = writeln!(
            out,
            "ids: {} spans had base64 ids (the generic protobuf JSON mapping, as a naive \
             converter writes them; OTLP JSON and the Collector write hex): decoded",
            r.input.base64_ids
        );
    }
    out.push('\n');
    if let Some(why) = &r.nothing_to_judge {
        let _ = writeln!(out, "{why} (exit status 4)");
    } else if r.findings.is_empty() {
        out.push_str("findings: none\n");
    } else {
        let _ = writeln!(out, "findings ({}):", r.findings.len());
        for f in &r.findings {
            let _ = writeln!(out, "  {:<5} {}", severity(f.severity), f.detail);
            if let Some(t) = &f.example_trace {
                let _ = writeln!(out, "        e.g. trace {t}");
            }
        }
    }
    out.push('\n');
    let headers = [
        "hop", "depth", "spans", "done", "refused", "expired", "cancel", "rem p50", "dur p50",
        "dur p99", "missing", "late", "resets",
    ];
    let rows: Vec<Vec<String>> = r
        .hops
        .iter()
        .map(|h| {
            vec![
                h.hop.clone(),
                h.depth.map_or_else(|| "-".to_owned(), |d| d.to_string()),
                h.spans.to_string(),
                h.completed.to_string(),
                h.refused.to_string(),
                h.expired.to_string(),
                h.cancelled.to_string(),
                opt(h.remaining_p50_ms),
                opt(h.duration_p50_ms),
                opt(h.duration_p99_ms),
                h.missing.to_string(),
                h.late.to_string(),
                h.resets.to_string(),
            ]
        })
        .collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let mut l = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i == 0 {
                let _ = write!(l, "{c:<w$}");
            } else {
                let _ = write!(l, "  {c:>w$}");
            }
        }
        l.trim_end().to_owned() + "\n"
    };
    if !rows.is_empty() {
        out.push_str("per hop (times in ms):\n");
        out.push_str(&line(headers.iter().map(|h| (*h).to_owned()).collect()));
        for row in rows {
            out.push_str(&line(row));
        }
    }
    services(&mut out, r);
    rollout(&mut out, r);
    if !r.depths.is_empty() {
        out.push_str("\nrefusals by depth (S6):\n");
        for d in &r.depths {
            let _ = writeln!(
                out,
                "  depth {}: {} hops, {} refused ({:.1}%)",
                d.depth,
                d.hops,
                d.refused,
                d.refusal_rate * 100.0
            );
        }
    }
    if r.problems_total > 0 {
        let _ = writeln!(
            out,
            "\ncould not read ({} problem(s) of {} kind(s)):",
            r.problems_total,
            r.problem_kinds.len()
        );
        for k in &r.problem_kinds {
            let _ = writeln!(out, "  {} x {}", k.count, k.kind);
            for p in &k.examples {
                let _ = writeln!(out, "      e.g. {p}");
            }
        }
    }
    out
}

/// "n of m (p%)", or "-" when there is no m.
fn share(n: u64, of: u64) -> String {
    if of == 0 {
        "-".to_owned()
    } else {
        format!("{n} of {of} ({:.0}%)", n as f64 * 100.0 / of as f64)
    }
}

/// The rollout map's cells for one service: with deadline, forwards.
fn rollout_cells(s: &super::report::RolloutRow) -> (String, String) {
    let forwards = match s.forwards {
        super::report::Forwards::NoCalls => "no calls".to_owned(),
        f => format!(
            "{} ({} of {})",
            f.name(),
            s.calls_out_with_deadline,
            s.calls_out
        ),
    };
    (share(s.inbound_with_deadline, s.inbound), forwards)
}

/// The rollout map: per service, how far deadline propagation has got.
fn rollout(out: &mut String, r: &Report) {
    if r.rollout.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nrollout map (inbound requests that arrived with a deadline; outbound calls that \
         carried one; inbound refused; inbound late):"
    );
    let _ = writeln!(
        out,
        "  {:<20} {:>7} {:>18}  {:<20} {:>7} {:>6}",
        "service", "inbound", "with deadline", "forwards", "refused", "late"
    );
    for s in &r.rollout {
        let (with, forwards) = rollout_cells(s);
        let _ = writeln!(
            out,
            "  {:<20} {:>7} {:>18}  {:<20} {:>7} {:>6}",
            s.service, s.inbound, with, forwards, s.refused, s.late
        );
    }
}

/// Per service and per edge, from span timing alone.
fn services(out: &mut String, r: &Report) {
    if r.services.is_empty() {
        return;
    }
    let outcomes = |v: &[(String, u64)]| {
        let shown: Vec<String> = v
            .iter()
            .filter(|(k, _)| k != "ok" && k != "unknown")
            .map(|(k, c)| format!("{c} {k}"))
            .collect();
        if shown.is_empty() {
            "-".to_owned()
        } else {
            shown.join(", ")
        }
    };
    let _ = writeln!(
        out,
        "\nper service, from span timing (ms; after caller: the server span ended after the \
         client span that called it):"
    );
    let _ = writeln!(
        out,
        "  {:<20} {:>5} {:>7} {:>13} {:>7} {:>7} {:>10} {:>10}  server / client outcomes",
        "service", "depth", "server", "after caller", "p50", "max", "for nobody", "after root"
    );
    for s in &r.services {
        let _ = writeln!(
            out,
            "  {:<20} {:>5} {:>7} {:>13} {:>7} {:>7} {:>10} {:>10}  {} / {}",
            s.service,
            s.depth.map_or_else(|| "-".to_owned(), |d| d.to_string()),
            s.server_spans,
            format!("{} of {}", s.after_caller, s.with_caller),
            opt(s.after_caller_p50_ms),
            opt(s.after_caller_max_ms),
            s.for_nobody_ms,
            s.after_root,
            outcomes(&s.server_outcomes),
            outcomes(&s.client_outcomes)
        );
    }
    if !r.timing_edges.is_empty() {
        out.push_str("\nper edge, from span timing (ms):\n");
        for e in &r.timing_edges {
            let _ = writeln!(
                out,
                "  {} -> {}: {} of {} calls went on after the caller's span ended (median {}, \
                 max {}; {} for nobody)",
                e.caller,
                e.server,
                e.after_caller,
                e.calls,
                opt(e.after_caller_p50_ms),
                opt(e.after_caller_max_ms),
                e.for_nobody_ms
            );
        }
    }
    if let Some(d) = r.chain_depth {
        let _ = writeln!(
            out,
            "\nchain depth: median {}, max {} services ({} traces)",
            d.p50, d.max, d.traces
        );
    }
}

/// The report as JSON.
pub fn json(r: &Report) -> String {
    serde_json::to_string_pretty(r).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// The rollout map as an HTML table (a service with no deadline inbound or outbound is
/// marked, one partly there too).
fn rollout_html(r: &Report) -> String {
    if r.rollout.is_empty() {
        return "<p>No service seen.</p>".to_owned();
    }
    let mut t = String::from(
        "<table class=\"rollout\"><tr><th>service</th><th>inbound</th><th>with deadline</th>\
         <th>forwards</th><th>refused</th><th>late</th></tr>",
    );
    for s in &r.rollout {
        let (with, forwards) = rollout_cells(s);
        let class = match (s.inbound_deadline_share, s.forwards) {
            (Some(x), _) if x < 1.0 => " class=\"partial\"",
            (_, super::report::Forwards::None | super::report::Forwards::Some) => {
                " class=\"partial\""
            }
            _ => "",
        };
        let _ = write!(
            t,
            "<tr{class}><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&s.service),
            s.inbound,
            esc(&with),
            esc(&forwards),
            s.refused,
            s.late
        );
    }
    t.push_str("</table>");
    t
}

fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A self-contained HTML page: the hop tree (calls and resets on each edge, a reset edge
/// in red), the findings, and the tables.
pub fn html(r: &Report) -> String {
    let mut children: HashMap<&str, Vec<&super::report::TreeEdge>> = HashMap::new();
    for e in &r.tree {
        children.entry(e.parent.as_str()).or_default().push(e);
    }
    let flagged: HashSet<&str> = r.findings.iter().map(|f| f.hop.as_str()).collect();
    let mut tree = String::new();
    fn node(
        out: &mut String,
        name: &str,
        note: &str,
        reset: bool,
        children: &HashMap<&str, Vec<&super::report::TreeEdge>>,
        flagged: &HashSet<&str>,
        path: &mut Vec<String>,
    ) {
        let class = if reset {
            " class=\"reset\""
        } else if flagged.contains(name) {
            " class=\"flag\""
        } else {
            ""
        };
        let _ = write!(out, "<li><span{class}>{}</span> {}", esc(name), esc(note));
        if path.iter().any(|p| p == name) || path.len() > 32 {
            out.push_str(" (cycle)</li>");
            return;
        }
        if let Some(kids) = children.get(name) {
            path.push(name.to_owned());
            out.push_str("<ul>");
            for e in kids {
                let note = if e.resets > 0 {
                    format!("{} calls, {} budget resets (S13)", e.calls, e.resets)
                } else {
                    format!("{} calls", e.calls)
                };
                node(out, &e.child, &note, e.resets > 0, children, flagged, path);
            }
            out.push_str("</ul>");
            path.pop();
        }
        out.push_str("</li>");
    }
    tree.push_str("<ul class=\"tree\">");
    for (root, n) in &r.roots {
        node(
            &mut tree,
            root,
            &format!("{n} traces"),
            false,
            &children,
            &flagged,
            &mut Vec::new(),
        );
    }
    tree.push_str("</ul>");
    let mut findings = String::new();
    if let Some(why) = &r.nothing_to_judge {
        let _ = write!(findings, "<p><b>{}</b></p>", esc(why));
    } else if r.findings.is_empty() {
        findings.push_str("<p>No findings.</p>");
    } else {
        findings.push_str("<ul>");
        for f in &r.findings {
            let _ = write!(
                findings,
                "<li class=\"{}\"><b>{}</b> {}</li>",
                severity(f.severity).to_lowercase(),
                severity(f.severity),
                esc(&f.detail)
            );
        }
        findings.push_str("</ul>");
    }
    let mut problems = String::new();
    if r.problems_total > 0 {
        let _ = write!(
            problems,
            "<h2>Could not read ({} problems)</h2><ul>",
            r.problems_total
        );
        for k in &r.problem_kinds {
            let _ = write!(problems, "<li>{} &times; {}<ul>", k.count, esc(&k.kind));
            for p in &k.examples {
                let _ = write!(problems, "<li><code>{}</code></li>", esc(&p.to_string()));
            }
            problems.push_str("</ul></li>");
        }
        problems.push_str("</ul>");
    }
    format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>hopbudget audit</title>\
         <style>body{{font-family:sans-serif;margin:2em;max-width:80em}}\
         .tree li{{margin:.2em 0}}table.rollout td,table.rollout th{{padding:.2em .8em;\
         text-align:right}}table.rollout td:first-child{{text-align:left}}.partial{{color:#a60}}.reset{{color:#b00;font-weight:bold}}.flag{{color:#a60}}\
         li.error{{color:#b00}}pre{{background:#f6f6f6;padding:1em;overflow:auto}}</style>\
         </head><body><h1>hopbudget audit</h1><h2>Hop tree</h2>{tree}<h2>Findings</h2>\
         {findings}<h2>Rollout map</h2>{rollout}<h2>Tables</h2><pre>{}</pre>{problems}\
         </body></html>\n",
        esc(&table(r)),
        rollout = rollout_html(r)
    )
}
