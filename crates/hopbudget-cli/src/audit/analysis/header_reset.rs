//! Budget resets and drops read from the deadline headers OpenTelemetry instrumentation
//! already captured (`http.request.header.*`, read by `span::deadline_header`), on
//! spans that carry nothing of hopbudget's.
//!
//! Within each trace, a service's SERVER span holds the budget it received; each CLIENT span
//! it made under that server span holds the budget it sent. What it had left when the call
//! started is what it received minus the time its server span had already run (both ends on
//! the same host's clock, so no skew). Sending more than that resets the budget (S13): the
//! callee is told it has time the request no longer has. Sending no deadline header at all
//! after receiving one drops it (C8). Per service and callee: calls compared, resets, how
//! much was added (median, max) and drops.
//!
//! Only relative carriers (milliseconds, `grpc-timeout`) are compared; an absolute
//! `x-request-deadline` counts as received and sent (so a drop is still seen) but is not
//! measured. A server span with hopbudget's own `deadline.*` attributes is left to the hop
//! analysis ([`super::analyze`]), which finds its resets already.
//!
//! Behind `hopbudget proxy`, the service's header is not what the callee is told: the
//! sidecar's egress span of the call says what was (`deadline.told_ms`). A header with more
//! than was left that the egress cut down to no more than was left is counted as **capped**,
//! not as a reset; one the egress passed on is reported by [`super::told`]. A call without a
//! header is a drop only when it carried no deadline at all (`calls.rs`: the egress stamps
//! one for a service that forwards none), as the rollout map counts it.

use foldhash::HashMap;

use super::calls::Calls;
use crate::audit::histogram::Histogram;
use crate::audit::span::{Span, Sym};

const SERVER: u8 = 2;
const CLIENT: u8 = 3;
/// Distinct (service, callee) edges kept; past it, new ones are not compared.
const MAX_EDGES: usize = 10_000;

/// One service's calls to one callee, compared with what the service received.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct HeaderEdge {
    /// Calls made under a server span that received a deadline header.
    pub(crate) calls: u64,
    /// Of which sent more than was left.
    pub(crate) resets: u64,
    /// Sent minus left, of the resets (ms).
    pub(crate) added: Histogram,
    /// What was received and what was sent, of the resets (ms).
    pub(crate) received: Histogram,
    pub(crate) sent: Histogram,
    /// Of which sent no deadline header, and the call carried none ([`Calls`]).
    pub(crate) dropped: u64,
    /// Of which sent more than was left, but the sidecar's egress told the callee no more
    /// than was left: capped, not a reset.
    pub(crate) capped: u64,
    /// Sent minus left, of the capped calls (ms).
    pub(crate) capped_added: Histogram,
    #[serde(with = "crate::audit::serde_as::hex_id")]
    pub(crate) reset_example: Option<u128>,
    #[serde(with = "crate::audit::serde_as::hex_id")]
    pub(crate) drop_example: Option<u128>,
}

/// Everything kept across traces: per (service, callee), never per trace.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct HeaderResetAcc {
    #[serde(with = "crate::audit::serde_as::pairs")]
    pub(crate) edges: HashMap<(Sym, Sym), HeaderEdge>,
}

/// The SERVER span of the same service that `c` was made under, if any.
fn server_above<'a>(spans: &'a [Span], index: &HashMap<u64, usize>, c: &Span) -> Option<&'a Span> {
    let mut parent = c.parent;
    for _ in 0..spans.len() {
        let p = &spans[*index.get(&parent)?];
        if p.service != c.service {
            return None;
        }
        if p.kind == SERVER {
            return Some(p);
        }
        parent = p.parent;
    }
    None
}

impl HeaderResetAcc {
    /// Compare one finished trace; `index` maps span ids to their place in `spans`.
    pub(crate) fn trace(
        &mut self,
        spans: &[Span],
        index: &HashMap<u64, usize>,
        calls: &Calls,
        tolerance_ms: i64,
    ) {
        // The service each client span called: its child server span's, else its own name.
        let callee: HashMap<u64, Sym> = spans
            .iter()
            .filter(|s| s.kind == SERVER && s.parent != 0)
            .map(|s| (s.parent, s.service))
            .collect();
        // A sidecar's egress span is the call's record, not a call the service made itself.
        for c in spans.iter().filter(|s| s.kind == CLIENT && !s.is_egress()) {
            let Some(server) = server_above(spans, index, c) else {
                continue;
            };
            if !server.deadline_header || server.hop.is_some() {
                continue;
            }
            // Through the sidecar's egress: the callee is the one below the egress.
            let egress = calls.egress_of(c.id).map(|j| &spans[j]);
            let to = egress.map_or(c.id, |e| e.id);
            let named = callee.get(&to).copied().or(egress.and_then(|e| e.peer));
            let key = (c.service, named.unwrap_or(c.name));
            if self.edges.len() >= MAX_EDGES && !self.edges.contains_key(&key) {
                continue;
            }
            if !calls.carried(c.id) {
                let e = self.edges.entry(key).or_default();
                e.calls += 1;
                e.dropped += 1;
                e.drop_example.get_or_insert(c.trace);
                continue;
            }
            let (Some(received), Some(sent)) = (server.header_ms, c.header_ms) else {
                continue;
            };
            let spent_ms = (i128::from(c.start_ns) - i128::from(server.start_ns)) / 1_000_000;
            let left_ms = i128::from(received) - spent_ms.max(0);
            let added = (i128::from(sent) - left_ms) as i64;
            // What the egress told the callee decides: the service's header went no further.
            let told = egress.and_then(|e| e.hop).and_then(|h| h.told_ms);
            let e = self.edges.entry(key).or_default();
            e.calls += 1;
            if added > tolerance_ms
                && let Some(told) = told
            {
                if i128::from(told) - left_ms <= i128::from(tolerance_ms) {
                    e.capped += 1;
                    e.capped_added.add(added as u64);
                }
                // Else the callee was told more than was left: `told` reports it, an error.
            } else if added > tolerance_ms {
                e.resets += 1;
                e.added.add(added as u64);
                e.received.add(u64::from(received));
                e.sent.add(u64::from(sent));
                e.reset_example.get_or_insert(c.trace);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::status::StdOutcome;

    fn span(
        id: u64,
        parent: u64,
        service: u32,
        kind: u8,
        start_ms: u64,
        header: Option<u32>,
    ) -> Span {
        Span {
            trace: 7,
            id,
            parent,
            service: Sym(service),
            name: Sym(9),
            kind,
            start_ns: start_ms * 1_000_000,
            end_ns: (start_ms + 10) * 1_000_000,
            hop: None,
            std: StdOutcome::Unknown,
            deadline_header: header.is_some(),
            header_ms: header,
            own_timeout: false,
            proxy: Default::default(),
            peer: None,
        }
    }

    fn run(spans: &[Span]) -> HeaderResetAcc {
        let index = spans.iter().enumerate().map(|(i, s)| (s.id, i)).collect();
        let names = crate::audit::span::Interner::new(10);
        let calls = Calls::of_trace(
            spans,
            &crate::audit::analysis::calls::NoCarrier::new(&names),
        );
        let mut acc = HeaderResetAcc::default();
        acc.trace(spans, &index, &calls, 2);
        acc
    }

    #[test]
    fn more_than_was_left_is_a_reset_less_is_not_none_is_a_drop() {
        // Service 1 received 800 at t=0, called service 2 at t=100 with 5000 (left: 700),
        // service 2 received 5000, called service 3 at t=50 with 2000 and 4 with nothing.
        let acc = run(&[
            span(1, 0, 1, SERVER, 0, Some(800)),
            span(2, 1, 1, CLIENT, 100, Some(5_000)),
            span(3, 2, 2, SERVER, 101, Some(5_000)),
            span(4, 3, 2, CLIENT, 150, Some(2_000)),
            span(5, 4, 3, SERVER, 151, Some(2_000)),
            span(6, 3, 2, CLIENT, 160, None),
        ]);
        let reset = &acc.edges[&(Sym(1), Sym(2))];
        assert_eq!((reset.calls, reset.resets), (1, 1));
        assert_eq!(reset.added.quantile(1.0), Some(4_300));
        let fine = &acc.edges[&(Sym(2), Sym(3))];
        assert_eq!((fine.calls, fine.resets, fine.dropped), (1, 0, 0));
        let dropped = &acc.edges[&(Sym(2), Sym(9))];
        assert_eq!((dropped.calls, dropped.resets, dropped.dropped), (1, 0, 1));
        assert!(!acc.edges.contains_key(&(Sym(3), Sym(9))));
    }
}
