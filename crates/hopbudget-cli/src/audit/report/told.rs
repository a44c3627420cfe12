//! The findings of what each hop was told ([`crate::audit::analysis::told`]): a hop told more than its
//! caller had left, and outbound calls that matched no inbound request. Both are errors
//! (exit status 1) whatever their share of calls: a sidecar must never grant more than the
//! caller had (C26).

use super::finding::{Finding, FindingKind, Severity};
use super::reset_severity::percent;
use crate::audit::analysis::told::ToldAcc;
use crate::audit::span::{Interner, Sym};

/// One `told_more_than_caller_had` per edge with an increase, one `unmatched_call` per
/// (service, destination) with a call that matched no request.
pub(crate) fn build(findings: &mut Vec<Finding>, acc: &ToldAcc, names: &Interner) {
    let mut keys: Vec<&(Sym, Sym)> = acc.edges.keys().collect();
    keys.sort_by_key(|(a, b)| (names.name(*a), names.name(*b)));
    for key in keys {
        let e = &acc.edges[key];
        if e.more == 0 {
            continue;
        }
        let (caller, callee) = (names.name(key.0), names.name(key.1));
        let q = |h: &crate::audit::histogram::Histogram, q| h.quantile(q).unwrap_or(0);
        let (p50, max) = (q(&e.added, 0.5), q(&e.added, 1.0));
        let what = if key.0 == key.1 {
            format!(
                "the sidecar in front of {callee} told it more than arrived: median {} ms \
                 told, {} ms arrived",
                q(&e.told, 0.5),
                q(&e.left, 0.5)
            )
        } else {
            format!(
                "{callee} was told more than {caller} had left when it called: median {} ms \
                 told, {} ms left",
                q(&e.told, 0.5),
                q(&e.left, 0.5)
            )
        };
        findings.push(Finding {
            kind: FindingKind::ToldMoreThanCallerHad,
            severity: Severity::Error,
            hop: callee.to_owned(),
            count: e.more,
            of: e.compared,
            value_ms: Some(max as i64),
            related: vec![caller.to_owned()],
            below: Vec::new(),
            detail: format!(
                "told more than the caller had (C26): {what}; {p50} ms more (median), at most \
                 {max} ms, in {} of {} calls ({:.1}%): {callee} may work on after {caller}'s \
                 request is over",
                e.more,
                e.compared,
                percent(e.more, e.compared)
            ),
            example_trace: e.example.map(|t| format!("{t:032x}")),
        });
    }
    let mut keys: Vec<&(Sym, Sym)> = acc.unmatched.keys().collect();
    keys.sort_by_key(|(a, b)| (names.name(*a), names.name(*b)));
    for key in keys {
        let u = &acc.unmatched[key];
        let (service, dest) = (names.name(key.0), names.name(key.1));
        let of = acc.egress_calls.get(&key.0).copied().unwrap_or(u.calls);
        let told = u
            .told
            .quantile(0.5)
            .map_or("nothing was stamped".to_owned(), |t| {
                format!("they were told median {t} ms, not what their request had left")
            });
        findings.push(Finding {
            kind: FindingKind::UnmatchedCall,
            severity: Severity::Error,
            hop: service.to_owned(),
            count: u.calls,
            of,
            value_ms: u.told.quantile(0.5).map(|t| t as i64),
            related: vec![dest.to_owned()],
            below: Vec::new(),
            detail: format!(
                "outbound call from {service} to {dest} matched no inbound request: {service} \
                 does not carry trace context ({} of {of} of its egress calls; {told}). Pass \
                 the inbound traceparent on to outbound calls (an OpenTelemetry SDK with its \
                 HTTP client instrumented does), or forward the sidecar's --request-id-header \
                 (C26)",
                u.calls
            ),
            example_trace: u.example.map(|t| format!("{t:032x}")),
        });
    }
}
