//! The findings, built from the accumulated per-hop counters: each kind's threshold and the
//! figures it names (see the kinds on [`FindingKind`]).

pub(crate) use super::rules::FindingRules;
use super::{DepthRow, Finding, FindingKind, HopRow, Report, Severity, TraceStats, TreeEdge};
use crate::audit::analysis::analyze::{Accumulated, HopAcc, HopKey};
use crate::audit::analysis::group::GroupStats;
use crate::audit::histogram::spike;
use crate::audit::input::InputStats;
use crate::audit::problem::{Problem, Problems};
use crate::audit::span::Interner;

pub(crate) struct Inputs<'a> {
    pub(crate) acc: &'a Accumulated,
    pub(crate) names: &'a Interner,
    pub(crate) input: InputStats,
    pub(crate) grouping: GroupStats,
    pub(crate) problems: Problems,
    pub(crate) rules: FindingRules,
}

fn label(names: &Interner, key: HopKey) -> String {
    let service = names.name(key.0);
    let route = names.name(key.1);
    if route.is_empty() || route == service || route.starts_with(&format!("{service} ")) {
        route_or(service, route)
    } else {
        format!("{service} {route}")
    }
}

fn route_or(service: &str, route: &str) -> String {
    if route.is_empty() {
        service.to_owned()
    } else {
        route.to_owned()
    }
}

fn top(map: &foldhash::HashMap<HopKey, u64>, names: &Interner, n: usize) -> Vec<String> {
    let mut v: Vec<(String, u64)> = map.iter().map(|(k, c)| (label(names, *k), *c)).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.into_iter().take(n).map(|(l, _)| l).collect()
}

pub(crate) fn build(i: Inputs<'_>) -> Report {
    let Inputs {
        acc,
        names,
        input,
        mut grouping,
        problems,
        rules,
    } = i;
    let grouping_read = grouping;
    let mut findings = Vec::new();
    let mut keys: Vec<HopKey> = acc.hops.keys().copied().collect();
    keys.sort_by_key(|k| (acc.hops[k].depth().unwrap_or(u32::MAX), label(names, *k)));
    let mut hops = Vec::new();
    for key in &keys {
        let h = &acc.hops[key];
        let hop = label(names, *key);
        hop_findings(&mut findings, names, &hop, h, rules);
        hops.push(HopRow {
            hop,
            service: names.name(key.0).to_owned(),
            route: names.name(key.1).to_owned(),
            depth: h.depth(),
            spans: h.spans,
            completed: h.outcomes[0],
            refused: h.outcomes[1],
            expired: h.outcomes[2],
            cancelled: h.outcomes[3],
            remaining_p50_ms: h.remaining.quantile(0.5),
            duration_p50_ms: h.durations.quantile(0.5),
            duration_p99_ms: h.durations.quantile(0.99),
            missing: h.missing_at_root + h.missing_inner,
            late: h.late,
            resets: h.resets + h.told_more,
        });
    }
    let depths: Vec<DepthRow> = acc
        .depths
        .iter()
        .enumerate()
        .map(|(d, a)| DepthRow {
            depth: d as u32,
            hops: a.hops,
            refused: a.refused,
            refusal_rate: if a.hops == 0 {
                0.0
            } else {
                a.refused as f64 / a.hops as f64
            },
        })
        .collect();
    over_shrunk(&mut findings, acc, names, &depths, rules);
    let timing = super::timing::build(&mut findings, &acc.timing, names, rules);
    super::header_reset::build(&mut findings, &acc.header_resets, names, rules.resets);
    super::told::build(&mut findings, &acc.told, names);
    for ((from, to), o) in &acc.offsets {
        let Some(min) = o.min else { continue };
        let services = format!("{} -> {}", names.name(*from), names.name(*to));
        let (direction, effect) = if min >= 0 {
            ("ahead of", "short")
        } else {
            ("behind", "long")
        };
        findings.push(Finding {
            kind: FindingKind::ClockOffset,
            severity: if min.abs() >= 50 {
                Severity::Warning
            } else {
                Severity::Info
            },
            hop: services,
            count: o.samples,
            of: o.samples,
            value_ms: Some(min),
            related: Vec::new(),
            below: Vec::new(),
            detail: format!(
                "{to}'s clock is about {abs} ms {direction} {from}'s (the least of {n} \
                 epoch-carried calls; the median call lost {med} ms): deadlines sent as an epoch \
                 instant arrive {abs} ms {effect} (S3); a relative carrier is immune",
                to = names.name(*to),
                from = names.name(*from),
                abs = min.abs(),
                n = o.samples,
                med = o.all.quantile(0.5).map_or(0, |v| v as i64 - 1_000_000),
            ),
            example_trace: None,
        });
    }
    findings.sort_by(|a, b| {
        a.severity
            .cmp(&b.severity)
            .then_with(|| b.count.cmp(&a.count))
            .then_with(|| a.hop.cmp(&b.hop))
    });
    let mut roots: Vec<(String, u64)> = acc
        .roots
        .iter()
        .map(|(k, c)| (label(names, *k), *c))
        .collect();
    roots.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let mut tree: Vec<TreeEdge> = acc
        .edges
        .iter()
        .map(|((p, c), e)| TreeEdge {
            parent: label(names, *p),
            child: label(names, *c),
            calls: e.calls,
            resets: e.resets,
        })
        .collect();
    tree.sort_by(|a, b| (&a.parent, &a.child).cmp(&(&b.parent, &b.child)));
    grouping.traces = grouping
        .traces
        .max(acc.traces_complete + acc.traces_partial);
    let nothing_to_judge = nothing_to_judge(acc, &input, problems.total);
    // Before the overflow note below, which a merge adds again.
    let merge_state = super::state::state(acc, names, &input, &grouping_read, &problems);
    let mut problems = problems;
    if names.overflowed > 0 || acc.hops_overflowed > 0 {
        problems.push(Problem::new(
            "(input)",
            None,
            format!(
                "too many distinct names ({} spans) or hops ({} spans): counted together as \
                 \"{}\"",
                names.overflowed,
                acc.hops_overflowed,
                names.name(Interner::OVERFLOW)
            ),
        ));
    }
    Report {
        input,
        grouping,
        traces: TraceStats {
            complete: acc.traces_complete,
            partial: acc.traces_partial,
            hop_spans: acc.hop_spans,
            detached: acc.detached_edges,
        },
        findings,
        hops,
        depths,
        roots,
        tree,
        problems: problems.shown,
        problems_total: problems.total,
        services: timing.services,
        timing_edges: timing.edges,
        chain_depth: timing.chain_depth,
        problem_kinds: problems.kinds,
        rollout: super::rollout::build(&acc.rollout, &acc.timing, names),
        nothing_to_judge,
        hopbudget_version: super::state::VERSION.to_owned(),
        merge_state,
        pictures: super::pictures::build(acc, names, rules),
    }
}

/// Why nothing could be audited, if so: no spans, or no span with anything to judge.
fn nothing_to_judge(acc: &Accumulated, input: &InputStats, problems: u64) -> Option<String> {
    if input.spans == 0 {
        let why = if problems > 0 {
            "no spans could be read (see the problems below)"
        } else if input.files == 0 && input.requests == 0 {
            "no export request was received (--listen)"
        } else if input.lines == 0 {
            "the input is empty"
        } else {
            "the input holds no spans"
        };
        return Some(format!("nothing to judge: {why}"));
    }
    let judged = acc.hop_spans + acc.header_spans + acc.timing.timed + acc.sidecar_spans;
    (judged == 0).then(|| {
        format!(
            "nothing to judge: 0 of {} spans carry a deadline header or a deadline.* \
             attribute, and none is a server span with a caller or root span to time it against",
            input.spans
        )
    })
}

fn hop_findings(
    findings: &mut Vec<Finding>,
    names: &Interner,
    hop: &str,
    h: &HopAcc,
    rules: FindingRules,
) {
    if h.resets > 0 {
        let from = top(&h.reset_from, names, 3);
        let below = top(&h.reset_below, names, 10);
        // Who broke the chain: a hop that read no carrier made up its own budget; one that
        // read a carrier was sent a fresh budget by its caller.
        let carried = h
            .sources
            .iter()
            .filter(|(s, _)| !matches!(names.name(**s), "fallback" | "none" | "local" | "detached"))
            .map(|(_, c)| c)
            .sum::<u64>();
        let culprit = if carried * 2 > h.spans {
            format!(
                "{} forwarded a fresh budget instead of what it had left",
                from.first().map_or("its caller", String::as_str)
            )
        } else {
            format!("{hop} ignored the inbound deadline and started its own budget")
        };
        let below_text = if below.is_empty() {
            String::new()
        } else {
            format!("; below it, {} ran on the reset budget", below.join(", "))
        };
        let median = h.reset_gains.quantile(0.5).unwrap_or(0);
        let (severity, why) = rules.resets.judge(median, h.resets, h.compared);
        findings.push(Finding {
            kind: FindingKind::ChainBreak,
            severity,
            hop: hop.to_owned(),
            count: h.resets,
            of: h.compared,
            value_ms: Some(h.reset_gain_max),
            related: from.clone(),
            below: below.clone(),
            detail: format!(
                "budget reset (S13): {hop} started with up to {} ms (median {median} ms) more \
                 than {} had left when it called ({} of {} calls, {:.1}%; {why}): \
                 {culprit}{below_text}",
                h.reset_gain_max,
                if from.is_empty() {
                    "its caller".to_owned()
                } else {
                    from.join(", ")
                },
                h.resets,
                h.compared,
                super::reset_severity::percent(h.resets, h.compared)
            ),
            example_trace: h.reset_example.map(|t| format!("{t:032x}")),
        });
    }
    if h.missing_inner > 0 {
        findings.push(Finding {
            kind: FindingKind::MissingDeadline,
            severity: Severity::Warning,
            hop: hop.to_owned(),
            count: h.missing_inner,
            of: h.spans,
            value_ms: None,
            related: Vec::new(),
            below: Vec::new(),
            detail: format!(
                "{} of {} arrivals at {hop} carried no deadline although a hop called it: the \
                 caller did not forward one (deadline.source = fallback, C8)",
                h.missing_inner, h.spans
            ),
            example_trace: None,
        });
    }
    if h.missing_at_root > 0 {
        findings.push(Finding {
            kind: FindingKind::MissingDeadline,
            severity: Severity::Info,
            hop: hop.to_owned(),
            count: h.missing_at_root,
            of: h.spans,
            value_ms: None,
            related: Vec::new(),
            below: Vec::new(),
            detail: format!(
                "{} of {} requests entered at {hop} without a deadline: the edge total was used \
                 (C8)",
                h.missing_at_root, h.spans
            ),
            example_trace: None,
        });
    }
    if let Some((value, count)) = spike(&h.spike_durations, rules.spike_min) {
        findings.push(Finding {
            kind: FindingKind::TimeoutSpike,
            severity: Severity::Warning,
            hop: hop.to_owned(),
            count,
            of: h.spans,
            value_ms: Some(value as i64),
            related: Vec::new(),
            below: Vec::new(),
            detail: format!(
                "{count} of {} spans of {hop} lasted {value} ms (within 1%), far above its \
                 median of {} ms: a fixed timeout firing at {value} ms, the signature of a \
                 default timeout below a chain break (S13)",
                h.spans,
                h.durations.quantile(0.5).unwrap_or(0)
            ),
            example_trace: None,
        });
    }
    if h.late > 0 {
        findings.push(Finding {
            kind: FindingKind::LateWork,
            severity: Severity::Warning,
            hop: hop.to_owned(),
            count: h.late,
            of: h.spans,
            value_ms: h.overrun.quantile(1.0).map(|v| v as i64),
            related: Vec::new(),
            below: Vec::new(),
            detail: format!(
                "{} of {} hops at {hop} finished their work after the deadline (median {} ms \
                 late, at most {} ms): work done for nobody",
                h.late,
                h.spans,
                h.overrun.quantile(0.5).unwrap_or(0),
                h.overrun.quantile(1.0).unwrap_or(0)
            ),
            example_trace: None,
        });
    }
}

fn over_shrunk(
    findings: &mut Vec<Finding>,
    acc: &Accumulated,
    names: &Interner,
    depths: &[DepthRow],
    rules: FindingRules,
) {
    let Some(deepest) = depths.iter().rev().find(|d| d.hops >= rules.depth_min) else {
        return;
    };
    let shallowest_rate = depths.first().map_or(0.0, |d| d.refusal_rate);
    if deepest.depth == 0 || deepest.refusal_rate <= 0.5 || shallowest_rate >= deepest.refusal_rate
    {
        return;
    }
    let at = &acc.depths[deepest.depth as usize];
    let leaves = top(&at.refused_by_hop, names, 5);
    let entry = acc.entry_budget.quantile(0.5);
    let need = acc.shortfall.quantile(0.9);
    let suggestion = match (entry, need) {
        (Some(e), Some(s)) => format!(
            "; the refused hops needed up to {s} ms more (p90), so an entry budget of about \
             {} ms would let them start (now {e} ms)",
            e + s
        ),
        (Some(e), None) => format!("; the entry budget is {e} ms"),
        _ => String::new(),
    };
    findings.push(Finding {
        kind: FindingKind::EntryBudgetTooSmall,
        severity: Severity::Warning,
        hop: leaves.first().cloned().unwrap_or_default(),
        count: deepest.refused,
        of: deepest.hops,
        value_ms: entry.map(|e| e as i64),
        related: leaves.clone(),
        below: Vec::new(),
        detail: format!(
            "entry budget too small for this chain depth (S6): {:.0}% of the hops at depth {} \
             ({}) were refused before work, not a failure of those hops{suggestion}",
            deepest.refusal_rate * 100.0,
            deepest.depth,
            leaves.join(", ")
        ),
        example_trace: None,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::histogram::Histogram;

    #[test]
    fn a_cluster_at_one_value_far_above_the_median_is_a_spike() {
        let mut h = Histogram::default();
        for i in 0..200 {
            h.add(20 + i % 15);
        }
        assert_eq!(spike(&h, 5), None, "a smooth body is no spike");
        for _ in 0..30 {
            h.add(2_000);
        }
        h.add(2_003);
        assert_eq!(spike(&h, 5), Some((2_000, 31)));
    }

    #[test]
    fn a_smooth_tail_is_no_spike() {
        let mut h = Histogram::default();
        for i in 0..1_000u64 {
            h.add(10 + i * i / 500);
        }
        assert_eq!(spike(&h, 5), None);
    }
}
