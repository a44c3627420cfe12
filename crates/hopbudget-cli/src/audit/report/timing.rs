//! The report's part that span timing alone gives ([`crate::audit::analysis::timing`]): work that went
//! on after its caller or the whole request had ended, chain depth, duration spikes on
//! client and server spans; per service and per edge.

use foldhash::HashMap;

use serde::Serialize;

use super::finding::{Finding, FindingKind, Severity};
use super::rules::FindingRules;
use crate::audit::analysis::timing::{Excess, ServiceTiming, SpanTiming, TimingAcc};
use crate::audit::histogram::Histogram;
use crate::audit::histogram::spike;
use crate::audit::span::{Interner, Sym};
use crate::audit::status::StdOutcome;

/// One service's server spans, timed against their callers (ms).
#[derive(Clone, Debug, Serialize)]
pub struct ServiceRow {
    /// Service name.
    pub service: String,
    /// The typical depth of its server spans: the median of the depths they were seen at (1
    /// is the first server of a request).
    pub depth: Option<u32>,
    /// Its server spans.
    pub server_spans: u64,
    /// Server spans compared with the client span that called them.
    pub with_caller: u64,
    /// Of which ended after that client span ended: the caller had given up.
    pub after_caller: u64,
    /// How much later, median.
    pub after_caller_p50_ms: Option<u64>,
    /// How much later, at most.
    pub after_caller_max_ms: Option<u64>,
    /// Time its server spans went on after their caller had ended, summed: work for nobody.
    pub for_nobody_ms: u64,
    /// Server spans that ended after the trace's root span ended.
    pub after_root: u64,
    /// Server spans by their standard outcome (`ok`, `error`, `unavailable`, `expired`,
    /// `cancelled`, `unknown`).
    pub server_outcomes: Vec<(String, u64)>,
    /// Client spans by their standard outcome.
    pub client_outcomes: Vec<(String, u64)>,
}

/// One caller-to-server edge, timed: the server span against the caller's client span.
#[derive(Clone, Debug, Serialize)]
pub struct TimingEdge {
    /// The calling service.
    pub caller: String,
    /// The called service.
    pub server: String,
    /// Calls compared.
    pub calls: u64,
    /// Of which the server went on after the caller's span ended.
    pub after_caller: u64,
    /// How much later, median (ms).
    pub after_caller_p50_ms: Option<u64>,
    /// How much later, at most (ms).
    pub after_caller_max_ms: Option<u64>,
    /// Summed (ms).
    pub for_nobody_ms: u64,
}

/// How many services deep requests went (server spans on one path).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct ChainDepth {
    /// Traces with at least one server span.
    pub traces: u64,
    /// Median depth.
    pub p50: u64,
    /// Deepest.
    pub max: u64,
}

/// The timing part of the report.
pub(crate) struct TimingReport {
    pub(crate) services: Vec<ServiceRow>,
    pub(crate) edges: Vec<TimingEdge>,
    pub(crate) chain_depth: Option<ChainDepth>,
}

fn outcomes(map: &HashMap<StdOutcome, u64>) -> Vec<(String, u64)> {
    let mut v: Vec<(StdOutcome, u64)> = map.iter().map(|(k, c)| (*k, *c)).collect();
    v.sort();
    v.into_iter()
        .map(|(k, c)| (k.name().to_owned(), c))
        .collect()
}

fn top(map: &HashMap<Sym, u64>, names: &Interner) -> Vec<String> {
    let mut v: Vec<(&str, u64)> = map.iter().map(|(k, c)| (names.name(*k), *c)).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    v.into_iter().take(3).map(|(n, _)| n.to_owned()).collect()
}

fn count_in(h: &Histogram, lo: u64, hi: u64) -> u64 {
    h.sorted()
        .iter()
        .filter(|(v, _)| *v >= lo && *v <= hi)
        .map(|(_, c)| c)
        .sum()
}

fn late_text(e: &Excess) -> String {
    format!(
        "median {} ms, at most {} ms later; {} ms of work for nobody in all",
        e.excess.quantile(0.5).unwrap_or(0),
        e.excess.quantile(1.0).unwrap_or(0),
        e.total_ms
    )
}

pub(crate) fn build(
    findings: &mut Vec<Finding>,
    t: &TimingAcc,
    names: &Interner,
    rules: FindingRules,
) -> TimingReport {
    let mut keys: Vec<Sym> = t.services.keys().copied().collect();
    keys.sort_by_key(|k| (t.services[k].depth().unwrap_or(u32::MAX), names.name(*k)));
    let mut services = Vec::new();
    for key in keys {
        let s = &t.services[&key];
        let service = names.name(key).to_owned();
        let callers = top(&s.late_for, names);
        if s.after_caller.count > 0 {
            let median = s.after_caller.excess.quantile(0.5).unwrap_or(0);
            let (severity, why) = rules.nobody.judge_as(
                median,
                s.after_caller.count,
                s.after_caller.of,
                "after the caller gave up",
            );
            findings.push(Finding {
                kind: FindingKind::WorkAfterCallerLeft,
                severity,
                hop: service.clone(),
                count: s.after_caller.count,
                of: s.after_caller.of,
                value_ms: s.after_caller.excess.quantile(1.0).map(|v| v as i64),
                related: callers.clone(),
                below: Vec::new(),
                detail: format!(
                    "work for nobody: {service} went on after the client span that called it \
                     had ended in {} of {} calls ({}), called by {}: the caller had given up; \
                     {why}",
                    s.after_caller.count,
                    s.after_caller.of,
                    late_text(&s.after_caller),
                    callers.join(", ")
                ),
                example_trace: s.after_caller.example.map(|t| format!("{t:032x}")),
            });
        }
        if s.after_root.count > 0 {
            findings.push(Finding {
                kind: FindingKind::WorkAfterRootEnded,
                severity: Severity::Warning,
                hop: service.clone(),
                count: s.after_root.count,
                of: s.after_root.of,
                value_ms: s.after_root.excess.quantile(1.0).map(|v| v as i64),
                related: Vec::new(),
                below: Vec::new(),
                detail: format!(
                    "work for nobody: {service} went on after the request's root span had \
                     ended in {} of {} server spans ({})",
                    s.after_root.count,
                    s.after_root.of,
                    late_text(&s.after_root)
                ),
                example_trace: s.after_root.example.map(|t| format!("{t:032x}")),
            });
        }
        outcome_finding(findings, &service, s);
        services.push(ServiceRow {
            service,
            depth: s.depth(),
            server_spans: s.server_spans,
            with_caller: s.after_caller.of,
            after_caller: s.after_caller.count,
            after_caller_p50_ms: s.after_caller.excess.quantile(0.5),
            after_caller_max_ms: s.after_caller.excess.quantile(1.0),
            for_nobody_ms: s.after_caller.total_ms,
            after_root: s.after_root.count,
            server_outcomes: outcomes(&s.server_outcomes),
            client_outcomes: outcomes(&s.client_outcomes),
        });
    }
    let mut edges: Vec<TimingEdge> = t
        .edges
        .iter()
        .map(|((c, s), e)| TimingEdge {
            caller: names.name(*c).to_owned(),
            server: names.name(*s).to_owned(),
            calls: e.of,
            after_caller: e.count,
            after_caller_p50_ms: e.excess.quantile(0.5),
            after_caller_max_ms: e.excess.quantile(1.0),
            for_nobody_ms: e.total_ms,
        })
        .collect();
    edges.sort_by(|a, b| (&a.caller, &a.server).cmp(&(&b.caller, &b.server)));
    let chain_depth = (t.depth.len() > 0).then(|| ChainDepth {
        traces: t.depth.len(),
        p50: t.depth.quantile(0.5).unwrap_or(0),
        max: t.depth.quantile(1.0).unwrap_or(0),
    });
    if let Some(d) = chain_depth {
        findings.push(Finding {
            kind: FindingKind::ChainDepth,
            severity: Severity::Info,
            hop: String::new(),
            count: d.traces,
            of: d.traces,
            value_ms: None,
            related: Vec::new(),
            below: Vec::new(),
            detail: format!(
                "chain depth: requests went up to {} services deep (median {}), counting the \
                 server spans on one path, over {} traces",
                d.max, d.p50, d.traces
            ),
            example_trace: None,
        });
    }
    let mut span_keys: Vec<&(Sym, Sym, u8)> = t.spans.keys().collect();
    span_keys.sort_by_key(|(s, n, k)| (names.name(*s), names.name(*n), *k));
    for key in span_keys {
        spike_finding(findings, *key, &t.spans[key], names, rules);
    }
    TimingReport {
        services,
        edges,
        chain_depth,
    }
}

/// Expired and cancelled told apart by the standard status attributes
/// ([`crate::audit::status`]), server and client side.
fn outcome_finding(findings: &mut Vec<Finding>, service: &str, s: &ServiceTiming) {
    let n = |m: &HashMap<StdOutcome, u64>, o| m.get(&o).copied().unwrap_or(0);
    let (se, sc, su) = (
        n(&s.server_outcomes, StdOutcome::Expired),
        n(&s.server_outcomes, StdOutcome::Cancelled),
        n(&s.server_outcomes, StdOutcome::Unavailable),
    );
    let (ce, cc) = (
        n(&s.client_outcomes, StdOutcome::Expired),
        n(&s.client_outcomes, StdOutcome::Cancelled),
    );
    if se + sc + ce + cc == 0 {
        return;
    }
    let clients: u64 = s.client_outcomes.values().sum();
    let mut parts = Vec::new();
    if se + sc + su > 0 {
        parts.push(format!(
            "of its {} server spans {se} expired (504, DEADLINE_EXCEEDED or a timeout \
             exception), {sc} cancelled (499 or CANCELLED: the caller went away), {su} \
             unavailable (503)",
            s.server_spans
        ));
    }
    if ce + cc > 0 {
        parts.push(format!(
            "of its {clients} client spans {ce} expired ({} on its own timeout, a timeout \
             exception: it gave up; {} answered 504 or DEADLINE_EXCEEDED), {cc} cancelled",
            s.client_gave_up.min(ce),
            ce.saturating_sub(s.client_gave_up)
        ));
    }
    findings.push(Finding {
        kind: FindingKind::ExpiredOrCancelled,
        severity: Severity::Warning,
        hop: service.to_owned(),
        count: se + sc + ce + cc,
        of: s.server_spans + clients,
        value_ms: None,
        related: Vec::new(),
        below: Vec::new(),
        detail: format!(
            "outcomes of {service} by the standard status attributes: {}",
            parts.join("; ")
        ),
        example_trace: None,
    });
}

fn spike_finding(
    findings: &mut Vec<Finding>,
    (service, name, kind): (Sym, Sym, u8),
    t: &SpanTiming,
    names: &Interner,
    rules: FindingRules,
) {
    let Some((value, count)) = spike(&t.durations, rules.spike_min) else {
        return;
    };
    let width = (value / 100).max(2);
    let own = count_in(&t.own_timeout, value, value + width);
    let answered = count_in(&t.answered, value, value + width);
    let side = if kind == 3 { "client" } else { "server" };
    let label = format!("{} {} ({side})", names.name(service), names.name(name));
    let mut who = Vec::new();
    if own > 0 {
        who.push(format!(
            "{own} of them recorded a timeout exception: this {side}'s own timeout fired, it \
             gave up"
        ));
    }
    if answered > 0 {
        who.push(if kind == 3 {
            format!(
                "{answered} of them were answered expired or cancelled (504, 499, \
                 DEADLINE_EXCEEDED, CANCELLED): a timeout at or below the server fired"
            )
        } else {
            format!(
                "{answered} of them answered expired or cancelled (504, 499, \
                 DEADLINE_EXCEEDED, CANCELLED): a timeout at or below this server fired"
            )
        });
    }
    let what = if who.is_empty() {
        "a fixed duration: a timeout whose status was not recorded, or a fixed wait; no \
         status or exception on them shows a timeout"
            .to_owned()
    } else {
        format!(
            "a default timeout firing at {value} ms, not a deadline; {}",
            who.join("; ")
        )
    };
    let left_out = if t.at_budget > 0 {
        format!(
            "; {} spans that ended when their hop's own budget ran out are not counted",
            t.at_budget
        )
    } else {
        String::new()
    };
    findings.push(Finding {
        kind: FindingKind::TimeoutSpike,
        severity: Severity::Warning,
        hop: label.clone(),
        count,
        of: t.durations.len(),
        value_ms: Some(value as i64),
        related: Vec::new(),
        below: Vec::new(),
        detail: format!(
            "{count} of {} {side} spans of {label} lasted {value} ms (within 1%), far above \
             their median of {} ms: {what}{left_out}",
            t.durations.len(),
            t.durations.quantile(0.5).unwrap_or(0)
        ),
        example_trace: None,
    });
}
