//! The findings of budgets reset or dropped by a deadline header
//! ([`crate::audit::analysis::header_reset`] counts them per service and callee).

use super::finding::{Finding, FindingKind, Severity};
use super::reset_severity::{ResetThresholds, percent};
use crate::audit::analysis::header_reset::HeaderResetAcc;
use crate::audit::histogram::Histogram;
use crate::audit::span::{Interner, Sym};

/// The findings: one `budget_reset_by_header` per service and callee with a reset (an error,
/// exit status 1, when large and common enough by `thresholds`, else a warning), one
/// `reset_capped` (for information) per one whose resets its sidecar capped, one
/// `deadline_dropped_by_header` (a warning) per one with a drop.
pub(crate) fn build(
    findings: &mut Vec<Finding>,
    acc: &HeaderResetAcc,
    names: &Interner,
    thresholds: ResetThresholds,
) {
    let mut keys: Vec<&(Sym, Sym)> = acc.edges.keys().collect();
    keys.sort_by_key(|(s, c)| (names.name(*s), names.name(*c)));
    for key in keys {
        let e = &acc.edges[key];
        let (service, to) = (names.name(key.0), names.name(key.1));
        if e.resets > 0 {
            let q = |h: &Histogram, q| h.quantile(q).unwrap_or(0);
            let (p50, max) = (q(&e.added, 0.5), q(&e.added, 1.0));
            let (severity, why) = thresholds.judge(p50, e.resets, e.calls);
            findings.push(Finding {
                kind: FindingKind::BudgetResetByHeader,
                severity,
                hop: service.to_owned(),
                count: e.resets,
                of: e.calls,
                value_ms: Some(max as i64),
                related: vec![to.to_owned()],
                below: Vec::new(),
                detail: format!(
                    "budget reset by header: {service} sent {to} a deadline header with more \
                     than it had left in {} of {} calls ({:.1}%; received median {} ms, sent \
                     median {} ms): it added median {p50} ms, at most {max} ms (sent minus what \
                     it received less the time its server span had already run); {why}",
                    e.resets,
                    e.calls,
                    percent(e.resets, e.calls),
                    q(&e.received, 0.5),
                    q(&e.sent, 0.5)
                ),
                example_trace: e.reset_example.map(|t| format!("{t:032x}")),
            });
        }
        if e.capped > 0 {
            findings.push(Finding {
                kind: FindingKind::ResetCapped,
                severity: Severity::Info,
                hop: service.to_owned(),
                count: e.capped,
                of: e.calls,
                value_ms: e.capped_added.quantile(1.0).map(|v| v as i64),
                related: vec![to.to_owned()],
                below: Vec::new(),
                detail: format!(
                    "capped, not a reset: {service} sent {to} a deadline header with more than \
                     it had left in {} of {} calls (median {} ms more), and its sidecar told \
                     {to} no more than {service} had left; behind the sidecar the chain holds, \
                     but {service} still ignores its deadline (a fix for when it leaves the \
                     sidecar)",
                    e.capped,
                    e.calls,
                    e.capped_added.quantile(0.5).unwrap_or(0)
                ),
                example_trace: None,
            });
        }
        if e.dropped > 0 {
            findings.push(Finding {
                kind: FindingKind::DeadlineDroppedByHeader,
                severity: Severity::Warning,
                hop: service.to_owned(),
                count: e.dropped,
                of: e.calls,
                value_ms: None,
                related: vec![to.to_owned()],
                below: Vec::new(),
                detail: format!(
                    "deadline dropped: {service} received a deadline header but sent none to \
                     {to} in {} of {} calls",
                    e.dropped, e.calls
                ),
                example_trace: e.drop_example.map(|t| format!("{t:032x}")),
            });
        }
    }
}
