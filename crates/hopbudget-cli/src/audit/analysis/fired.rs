//! Which spans of a trace ended because a deadline fired, so that none of them is taken for
//! a default timeout (a duration spike, S13) wherever in its budget it ended (#45 item 4).
//!
//! A span ended at a deadline when:
//!
//! - it is a hop that says so (`deadline.outcome = expired`); or
//! - it ended when the budget it was told ran out: from 1% (at least 2 ms) before to 2% (at
//!   least 20 ms, a timer's lateness) after. The budget is its own (`deadline.remaining_ms`,
//!   or a deadline header it received); for a span of a service behind `hopbudget proxy`,
//!   what the sidecar told the service (the ingress span's `deadline.told_ms`); for a client
//!   span, that of the server or hop span it was made in; at the origin, the header it sent;
//!   or
//! - a deadline fired below it, in the same request, and it ended as that answer climbed
//!   back: from 1% before that deadline to 2% (at least 20 ms) after. The deepest hop is told
//!   the least (each hop keeps its margin back), so it expires first and its callers end
//!   2-3% before their own budget: a window around each span's own budget alone misses them.
//!
//! Only deadlines that actually fired below count (an expired hop, or a span that ended at its
//! own budget), not every budget below: a call given a tight budget that answered in time
//! says nothing about its caller's end. Computed once per trace, in time linear in its spans
//! (each deadline climbs its ancestors until one already knows an earlier one).

use foldhash::HashMap;

use crate::audit::span::{Outcome, Proxy, Span};

const SERVER: u8 = 2;
const CLIENT: u8 = 3;

/// The spans of one trace that ended at a deadline, by their place in the trace.
pub(crate) struct Fired {
    at_deadline: Vec<bool>,
}

impl Fired {
    /// Work out, for every span of `spans` (`index`: span id to place), whether it ended at a
    /// deadline.
    pub(crate) fn of_trace(spans: &[Span], index: &HashMap<u64, usize>) -> Self {
        let ends: Vec<Option<u64>> = spans
            .iter()
            .map(|s| budget_end_ns(spans, index, s))
            .collect();
        let own: Vec<bool> = spans
            .iter()
            .zip(&ends)
            .map(|(s, end)| {
                s.hop_attrs().is_some_and(|h| h.outcome == Outcome::Expired)
                    || end.is_some_and(|e| within(s, e))
            })
            .collect();
        // The earliest deadline that fired in each span's subtree (itself included).
        let mut below: Vec<Option<u64>> = vec![None; spans.len()];
        for (j, s) in spans.iter().enumerate() {
            if !own[j] {
                continue;
            }
            let at = ends[j].unwrap_or(s.end_ns);
            let mut k = j;
            for _ in 0..spans.len() {
                if below[k].is_some_and(|b| b <= at) {
                    break;
                }
                below[k] = Some(at);
                match index.get(&spans[k].parent) {
                    Some(&p) if spans[k].parent != 0 && p != k => k = p,
                    _ => break,
                }
            }
        }
        let at_deadline = spans
            .iter()
            .enumerate()
            .map(|(i, s)| own[i] || below[i].is_some_and(|b| within(s, b)))
            .collect();
        Self { at_deadline }
    }

    /// Whether the span at `i` ended at a deadline.
    pub(crate) fn at_deadline(&self, i: usize) -> bool {
        self.at_deadline.get(i).copied().unwrap_or(false)
    }
}

/// Whether `s` ended near `deadline_ns`: from 1% of its duration (at least 2 ms) before to 2%
/// (at least 20 ms) after.
fn within(s: &Span, deadline_ns: u64) -> bool {
    let d = s.duration_ms() as i64;
    let off = ((i128::from(s.end_ns) - i128::from(deadline_ns)) / 1_000_000) as i64;
    off >= -(d / 100).max(2) && off <= (d / 50).max(20)
}

/// When the budget `s` was told ran out, if it is known (see the module's list).
fn budget_end_ns(spans: &[Span], index: &HashMap<u64, usize>, s: &Span) -> Option<u64> {
    let at = |x: &Span, ms: i64| x.start_ns.saturating_add(ms.max(0) as u64 * 1_000_000);
    let own = |x: &Span| {
        x.hop_attrs()
            .and_then(|h| h.remaining_ms)
            .or(x.header_ms.map(i64::from))
            .map(|b| at(x, b))
    };
    // What a service behind a sidecar was told: its spans live under that, not under what
    // reached the sidecar.
    let told = |x: &Span| {
        (x.proxy == Proxy::Ingress)
            .then(|| x.hop.and_then(|h| h.told_ms))
            .flatten()
            .map(|t| at(x, t))
    };
    // Only calls, servers and hops end at a deadline; internal spans are left out (a walk
    // up for each would cost time on every trace).
    if s.kind != SERVER && s.kind != CLIENT && s.hop.is_none() {
        return None;
    }
    if s.kind != CLIENT
        && let Some(end) = own(s)
    {
        return Some(end);
    }
    if s.is_egress() {
        // The call's own budget is the one its matched request had left.
        return s.hop.and_then(|h| h.remaining_ms).map(|r| at(s, r));
    }
    let mut parent = s.parent;
    for _ in 0..spans.len() {
        let Some(&j) = index.get(&parent) else { break };
        let p = &spans[j];
        if p.service != s.service || parent == 0 {
            break;
        }
        if let Some(end) = told(p) {
            return Some(end);
        }
        if p.kind == SERVER || p.hop_attrs().is_some() {
            return own(p);
        }
        parent = p.parent;
    }
    if s.kind == CLIENT {
        return s.header_ms.map(|b| at(s, i64::from(b)));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::span::{HopAttrs, Sym};
    use crate::audit::status::StdOutcome;

    fn span(id: u64, parent: u64, service: u32, kind: u8, start_ms: u64, end_ms: u64) -> Span {
        Span {
            trace: 1,
            id,
            parent,
            service: Sym(service),
            name: Sym(9),
            kind,
            start_ns: start_ms * 1_000_000,
            end_ns: end_ms * 1_000_000,
            hop: None,
            std: StdOutcome::Unknown,
            deadline_header: false,
            header_ms: None,
            own_timeout: false,
            proxy: Proxy::None,
            peer: None,
        }
    }

    fn hop(remaining: i64, outcome: Outcome) -> Option<HopAttrs> {
        Some(HopAttrs {
            remaining_ms: Some(remaining),
            source: None,
            margin_ms: None,
            outcome,
            required_ms: None,
            overrun_ms: None,
            told_ms: None,
            matched: None,
        })
    }

    fn fired(spans: &[Span]) -> Vec<bool> {
        let index = spans.iter().enumerate().map(|(i, s)| (s.id, i)).collect();
        let f = Fired::of_trace(spans, &index);
        (0..spans.len()).map(|i| f.at_deadline(i)).collect()
    }

    /// web (800 ms) calls stock, told 760 ms, whose deadline fires at 762; web's client span
    /// ends at 765, 4% before web's own budget: the deadline below, not a default timeout.
    /// A span ending at 600 is not near any deadline that fired.
    #[test]
    fn a_caller_ending_when_the_deadline_below_fired_ended_at_a_deadline() {
        let mut web = span(1, 0, 1, SERVER, 0, 768);
        web.hop = hop(800, Outcome::Completed);
        let client = span(2, 1, 1, CLIENT, 2, 765);
        let mut stock = span(3, 2, 2, SERVER, 2, 762);
        stock.hop = hop(760, Outcome::Expired);
        let mut early = span(4, 0, 3, SERVER, 0, 600);
        early.hop = hop(800, Outcome::Completed);
        assert_eq!(
            fired(&[web, client, stock, early]),
            [true, true, true, false]
        );
    }

    /// An expired hop ended at a deadline wherever in its budget it ended; a completed one
    /// that ended early did not, and a tight budget below that answered in time does not
    /// make its caller's end a deadline's.
    #[test]
    fn expired_is_a_deadline_wherever_it_ends_and_a_budget_that_did_not_fire_is_not() {
        let mut a = span(1, 0, 1, SERVER, 0, 300);
        a.hop = hop(1_000, Outcome::Expired);
        let mut b = span(2, 0, 1, SERVER, 0, 300);
        b.hop = hop(1_000, Outcome::Completed);
        let mut quick = span(3, 2, 2, SERVER, 10, 20);
        quick.hop = hop(290, Outcome::Completed);
        assert_eq!(fired(&[a, b, quick]), [true, false, false]);
    }

    /// Behind a sidecar, the service's own spans live under what it was told.
    #[test]
    fn a_service_behind_a_sidecar_is_judged_by_what_it_was_told() {
        let mut ingress = span(1, 0, 1, SERVER, 0, 790);
        ingress.proxy = Proxy::Ingress;
        ingress.hop = hop(800, Outcome::Completed);
        ingress.hop.as_mut().unwrap().told_ms = Some(786);
        let app = span(2, 1, 1, SERVER, 1, 787);
        assert_eq!(fired(&[ingress, app]), [true, true]);
    }
}
