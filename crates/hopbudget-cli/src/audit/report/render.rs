//! The report for people (a plain-text table; the HTML page is [`super::page::html`]) and for
//! machines (JSON, the [`Report`] as it is).

use std::fmt::Write as _;

use super::{Report, Severity};

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

pub(crate) fn severity(s: Severity) -> &'static str {
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
pub(crate) fn rollout_cells(s: &super::RolloutRow) -> (String, String) {
    let forwards = match s.forwards {
        super::Forwards::NoCalls => "no calls".to_owned(),
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
