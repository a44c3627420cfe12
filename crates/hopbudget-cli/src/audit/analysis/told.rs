//! What each hop was told, against what its caller had left when it called (C26, S20;
//! #45 item 4), where `hopbudget proxy`'s spans show it; and outbound calls that matched no
//! inbound request.
//!
//! A sidecar records, on its ingress span, the budget that arrived (`deadline.remaining_ms`)
//! and what it told the service behind it (`deadline.told_ms`); on each egress span, what it
//! told the next hop (`deadline.told_ms`) and whether the call matched an inbound request
//! (`deadline.matched`). Per trace:
//!
//! - **told more than the caller had.** For each egress span that stamped a budget, the
//!   caller had its arrival budget (the nearest span of its own service above the call that
//!   knows one: a hop or ingress span's `deadline.remaining_ms`, else a server span's captured
//!   deadline header) less the time from that span's start to the call's start. Both instants
//!   are on the caller's host, and `told_ms` is a number its sidecar wrote, so clock skew
//!   between hosts cannot enter. An ingress span called without an egress span (from a
//!   service on the library's layers, or a plain client span) is compared the same way, with
//!   what arrived at it as what it was told (relative carriers only: an epoch instant moves
//!   with the skew). More than the tolerance (`--tolerance-ms`, default 2 ms: each reading is
//!   whole milliseconds, rounded down) is an **error** (exit status 1), however rare or
//!   small: the sidecar exists to never grant more than the caller had. An ingress that told
//!   its service more than arrived is the same error, with the service as both ends.
//! - **matched no request.** An egress span with `deadline.matched = false` is a call the
//!   sidecar could not tie to an inbound request: the service did not pass on the trace
//!   context, so the call was given the profile's answer for a request without a deadline
//!   (the edge total, a refusal or none) instead of what its request had left. An **error**
//!   per (service, destination).
//!
//! Memory is per (caller, callee) and per (service, destination), never per trace.

use foldhash::HashMap;

use crate::audit::histogram::Histogram;
use crate::audit::span::{Proxy, Span, Sym};

const SERVER: u8 = 2;
/// Distinct edges kept; past it, new ones are not compared.
const MAX_EDGES: usize = 10_000;

/// One caller-to-callee edge through a sidecar.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct ToldEdge {
    /// Calls compared.
    pub(crate) compared: u64,
    /// Of which the callee was told more than the caller had left.
    pub(crate) more: u64,
    /// How much more (ms), of those.
    pub(crate) added: Histogram,
    /// What the callee was told and what the caller had left (ms), of those.
    pub(crate) told: Histogram,
    pub(crate) left: Histogram,
    #[serde(with = "crate::audit::serde_as::hex_id")]
    pub(crate) example: Option<u128>,
}

/// Calls of one service to one destination that matched no inbound request.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Unmatched {
    pub(crate) calls: u64,
    /// What they were told (ms), when something was stamped.
    pub(crate) told: Histogram,
    #[serde(with = "crate::audit::serde_as::hex_id")]
    pub(crate) example: Option<u128>,
}

/// Everything kept across traces.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct ToldAcc {
    /// (caller service, callee service or destination).
    #[serde(with = "crate::audit::serde_as::pairs")]
    pub(crate) edges: HashMap<(Sym, Sym), ToldEdge>,
    /// Egress calls per service, with or without a match: the share an error names.
    #[serde(with = "crate::audit::serde_as::pairs")]
    pub(crate) egress_calls: HashMap<Sym, u64>,
    /// (service, destination).
    #[serde(with = "crate::audit::serde_as::pairs")]
    pub(crate) unmatched: HashMap<(Sym, Sym), Unmatched>,
}

/// A budget a caller had: the span that knows it, and the budget on its arrival (ms).
struct Arrival<'a> {
    span: &'a Span,
    budget_ms: i64,
}

/// The nearest span at or above `from` of `from`'s service that knows the budget the service
/// had on arrival: a hop (or ingress) span's `deadline.remaining_ms`, else a server span's
/// captured deadline header.
fn arrival_at_or_above<'a>(
    spans: &'a [Span],
    index: &HashMap<u64, usize>,
    from: &'a Span,
) -> Option<Arrival<'a>> {
    let mut header: Option<Arrival<'a>> = None;
    let mut s = from;
    for _ in 0..spans.len() {
        if s.service != from.service {
            break;
        }
        if let Some(r) = s.hop_attrs().and_then(|h| h.remaining_ms) {
            return Some(Arrival {
                span: s,
                budget_ms: r,
            });
        }
        if header.is_none()
            && s.kind == SERVER
            && let Some(h) = s.header_ms
        {
            header = Some(Arrival {
                span: s,
                budget_ms: i64::from(h),
            });
        }
        if s.parent == 0 {
            break;
        }
        let Some(&j) = index.get(&s.parent) else {
            break;
        };
        s = &spans[j];
    }
    header
}

fn ms_between(from_ns: u64, to_ns: u64) -> i64 {
    ((i128::from(to_ns) - i128::from(from_ns)) / 1_000_000) as i64
}

impl ToldAcc {
    fn edge(&mut self, key: (Sym, Sym)) -> Option<&mut ToldEdge> {
        if self.edges.len() >= MAX_EDGES && !self.edges.contains_key(&key) {
            return None;
        }
        Some(self.edges.entry(key).or_default())
    }

    /// One comparison: `told` against `left` on the edge `key`.
    fn compare(&mut self, key: (Sym, Sym), told: i64, left: i64, tolerance_ms: i64, trace: u128) {
        let Some(e) = self.edge(key) else { return };
        e.compared += 1;
        let added = told - left;
        if added > tolerance_ms {
            e.more += 1;
            e.added.add(added as u64);
            e.told.add(told.max(0) as u64);
            e.left.add(left.max(0) as u64);
            e.example.get_or_insert(trace);
        }
    }

    /// Compare one finished trace; `index` maps span ids to their place in `spans`, `epoch`
    /// is the `deadline.source` of an epoch carrier (skew moves it: not compared).
    pub(crate) fn trace(
        &mut self,
        spans: &[Span],
        index: &HashMap<u64, usize>,
        epoch: Option<Sym>,
        tolerance_ms: i64,
    ) {
        // Most traces have no sidecar span: nothing to do, and no map to build.
        if spans.iter().all(|s| s.proxy == Proxy::None) {
            return;
        }
        // The arrival directly below each egress span: the next hop's ingress or server span.
        let mut below: HashMap<u64, usize> = HashMap::default();
        for (i, s) in spans.iter().enumerate() {
            if s.parent != 0 && (s.kind == SERVER || s.hop_attrs().is_some()) {
                below.entry(s.parent).or_insert(i);
            }
        }
        for s in spans {
            match s.proxy {
                Proxy::Egress => self.egress(spans, index, &below, s, tolerance_ms),
                Proxy::Ingress => self.ingress(spans, index, s, epoch, tolerance_ms),
                Proxy::None => {}
            }
        }
    }

    fn egress(
        &mut self,
        spans: &[Span],
        index: &HashMap<u64, usize>,
        below: &HashMap<u64, usize>,
        e: &Span,
        tolerance_ms: i64,
    ) {
        let callee = below
            .get(&e.id)
            .map(|&j| spans[j].service)
            .filter(|c| *c != e.service)
            .or(e.peer)
            .unwrap_or(e.name);
        let told = e.hop.and_then(|h| h.told_ms);
        if self.egress_calls.len() < MAX_EDGES || self.egress_calls.contains_key(&e.service) {
            *self.egress_calls.entry(e.service).or_default() += 1;
        }
        if e.hop.and_then(|h| h.matched) == Some(false)
            && (self.unmatched.len() < MAX_EDGES
                || self.unmatched.contains_key(&(e.service, callee)))
        {
            let u = self.unmatched.entry((e.service, callee)).or_default();
            u.calls += 1;
            if let Some(t) = told {
                u.told.add(t.max(0) as u64);
            }
            u.example.get_or_insert(e.trace);
        }
        // Nothing stamped (an untrusted destination): nothing told.
        let Some(told) = told else { return };
        let Some(parent) = index.get(&e.parent).map(|&j| &spans[j]) else {
            return;
        };
        let Some(had) = arrival_at_or_above(spans, index, parent) else {
            return;
        };
        let left = had.budget_ms - ms_between(had.span.start_ns, e.start_ns).max(0);
        self.compare((e.service, callee), told, left, tolerance_ms, e.trace);
    }

    fn ingress(
        &mut self,
        spans: &[Span],
        index: &HashMap<u64, usize>,
        a: &Span,
        epoch: Option<Sym>,
        tolerance_ms: i64,
    ) {
        let Some(hop) = a.hop else { return };
        // What its sidecar told the service, against what arrived.
        if let (Some(told), Some(arrived)) = (hop.told_ms, hop.remaining_ms) {
            self.compare((a.service, a.service), told, arrived, tolerance_ms, a.trace);
        }
        let Some(call) = index.get(&a.parent).map(|&j| &spans[j]) else {
            return;
        };
        // Through an egress span: compared there, on what it stamped.
        if call.is_egress() || call.service == a.service {
            return;
        }
        let (Some(arrived), false) = (
            hop.remaining_ms,
            hop.source.is_some() && hop.source == epoch,
        ) else {
            return;
        };
        let Some(had) = arrival_at_or_above(spans, index, call) else {
            return;
        };
        let left = had.budget_ms - ms_between(had.span.start_ns, call.start_ns).max(0);
        self.compare(
            (call.service, a.service),
            arrived,
            left,
            tolerance_ms,
            a.trace,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::span::{HopAttrs, Outcome};
    use crate::audit::status::StdOutcome;

    fn span(id: u64, parent: u64, service: u32, kind: u8, start_ms: u64) -> Span {
        Span {
            trace: 7,
            id,
            parent,
            service: Sym(service),
            name: Sym(9),
            kind,
            start_ns: start_ms * 1_000_000,
            end_ns: (start_ms + 50) * 1_000_000,
            hop: None,
            std: StdOutcome::Unknown,
            deadline_header: false,
            header_ms: None,
            own_timeout: false,
            proxy: Proxy::None,
            peer: None,
        }
    }

    fn sidecar(mut s: Span, proxy: Proxy, remaining: i64, told: Option<i64>) -> Span {
        s.proxy = proxy;
        s.hop = Some(HopAttrs {
            remaining_ms: Some(remaining),
            source: None,
            margin_ms: Some(5),
            outcome: Outcome::Completed,
            required_ms: None,
            overrun_ms: None,
            told_ms: told,
            matched: Some(true),
        });
        s
    }

    fn run(spans: &[Span]) -> ToldAcc {
        let index = spans.iter().enumerate().map(|(i, s)| (s.id, i)).collect();
        let mut acc = ToldAcc::default();
        acc.trace(spans, &index, None, 2);
        acc
    }

    /// web arrives with 800 at t=0 and calls at t=7 (793 left); its egress tells orders 986:
    /// 193 more. Orders' egress at t=20 of its 986... tells stock 764, less than orders had.
    #[test]
    fn told_more_than_left_is_counted_with_both_ends_and_the_amount() {
        let spans = [
            sidecar(span(1, 0, 1, SERVER, 0), Proxy::Ingress, 800, Some(795)),
            span(2, 1, 1, SERVER, 1),
            span(3, 2, 1, 3, 6),
            sidecar(span(4, 3, 1, 3, 7), Proxy::Egress, 793, Some(986)),
            sidecar(span(5, 4, 2, SERVER, 8), Proxy::Ingress, 986, Some(980)),
            sidecar(span(6, 5, 2, 3, 28), Proxy::Egress, 966, Some(764)),
            sidecar(span(7, 6, 3, SERVER, 29), Proxy::Ingress, 764, Some(759)),
        ];
        let acc = run(&spans);
        let e = &acc.edges[&(Sym(1), Sym(2))];
        assert_eq!((e.compared, e.more), (1, 1));
        assert_eq!(e.added.quantile(1.0), Some(193));
        let fine = &acc.edges[&(Sym(2), Sym(3))];
        assert_eq!((fine.compared, fine.more), (1, 0));
        for s in 1..=3 {
            assert_eq!(acc.edges[&(Sym(s), Sym(s))].more, 0, "ingress {s}");
        }
    }

    /// A call that matched no request is counted per service and destination.
    #[test]
    fn an_unmatched_call_is_counted_per_service_and_destination() {
        let mut e = sidecar(span(4, 0, 1, 3, 7), Proxy::Egress, 986, Some(986));
        e.hop.as_mut().unwrap().matched = Some(false);
        e.peer = Some(Sym(42));
        let acc = run(&[e]);
        assert_eq!(acc.unmatched[&(Sym(1), Sym(42))].calls, 1);
        assert!(acc.edges.is_empty(), "nothing above it to compare with");
    }
}
