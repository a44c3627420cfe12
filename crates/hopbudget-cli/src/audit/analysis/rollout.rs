//! The rollout map: per service, how far deadline propagation has got. Adoption goes one
//! service at a time (see the rollout guide), and what an operator watches at each step is,
//! per service: the share of its inbound requests that arrived with a deadline, whether its
//! outbound calls carry one, what it refuses, and what it does late.
//!
//! - **Inbound** are its SERVER and CONSUMER spans and its hop spans (a span with
//!   `deadline.*` attributes, C14). One **arrived with a deadline** when its hop attributes
//!   name a carrier (`deadline.source` other than `fallback`, `none`, `local` or `detached`)
//!   or, on plain OpenTelemetry spans, when it captured a deadline header
//!   (`http.request.header.*`, [`crate::audit::span`]).
//! - **Outbound** are its CLIENT and PRODUCER spans, and, where no client span was recorded
//!   (the library's own traces carry the context straight from a hop span), an inbound span
//!   of another service directly below one of its spans. A call **carried a deadline** when
//!   the client span captured a deadline header, the callee's inbound span arrived with one,
//!   or the sidecar's egress span of the call stamped one (`calls.rs`).
//! - A request or call recorded twice, by `hopbudget proxy` and by the service's own
//!   instrumentation (the service's server span under its sidecar's ingress span, an egress
//!   span under the service's client span), counts once (`Span::repeats`).
//! - **Refused**: inbound spans answered 503 or RESOURCE_EXHAUSTED ([`crate::audit::status`]) or with
//!   `deadline.outcome = refused` (C3).
//! - **Late**: inbound spans that ended more than the late-work tolerance after the client
//!   span that called them or the trace's root, or after their deadline
//!   (`deadline.overrun_ms`).
//!
//! Memory is per service, never per trace.

use foldhash::HashMap;

use super::calls::{Calls, NoCarrier, arrived_with_deadline, inbound, outbound};
use crate::audit::histogram::Histogram;
use crate::audit::span::{Outcome, Span, Sym};
use crate::audit::status::StdOutcome;

/// Distinct services kept; past it, new ones are not mapped.
const MAX_SERVICES: usize = 10_000;

/// One service's step in the rollout.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct ServiceRollout {
    pub(crate) inbound: u64,
    pub(crate) inbound_with_deadline: u64,
    pub(crate) calls_out: u64,
    pub(crate) calls_out_with_deadline: u64,
    pub(crate) refused: u64,
    pub(crate) late: u64,
}

/// The requests one service made of another: the call graph's edge, as the HTML report draws
/// it, labelled with what the callee was told on arrival.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct CallEdge {
    /// Inbound requests of the callee made by this caller.
    pub(crate) calls: u64,
    /// Of which arrived with a deadline.
    pub(crate) with_deadline: u64,
    /// The budget they arrived with (ms): a hop span's `deadline.remaining_ms` when a carrier
    /// brought it, else a relative deadline header the server span captured. Requests that
    /// arrived with none add nothing.
    pub(crate) told: Histogram,
}

/// The rollout map, across traces.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct RolloutAcc {
    #[serde(with = "crate::audit::serde_as::pairs")]
    pub(crate) services: HashMap<Sym, ServiceRollout>,
    /// (caller service, callee service). Absent from the state of an older report.
    #[serde(default, with = "crate::audit::serde_as::pairs")]
    pub(crate) edges: HashMap<(Sym, Sym), CallEdge>,
}

fn ms_later(end_ns: u64, than_ns: u64) -> i64 {
    ((i128::from(end_ns) - i128::from(than_ns)) / 1_000_000) as i64
}

impl RolloutAcc {
    fn entry(&mut self, service: Sym) -> Option<&mut ServiceRollout> {
        if self.services.len() >= MAX_SERVICES && !self.services.contains_key(&service) {
            return None;
        }
        Some(self.services.entry(service).or_default())
    }

    /// Count a request of `caller` that arrived at `s`, with the budget it was told.
    fn edge(&mut self, caller: Sym, s: &Span, with: bool) {
        let key = (caller, s.service);
        if self.edges.len() >= MAX_SERVICES && !self.edges.contains_key(&key) {
            return;
        }
        let e = self.edges.entry(key).or_default();
        e.calls += 1;
        e.with_deadline += u64::from(with);
        let told = match s.hop_attrs() {
            Some(h) if with => h.remaining_ms,
            Some(_) => None,
            None => s.header_ms.map(i64::from),
        };
        if let Some(ms) = told {
            e.told.add(ms.max(0) as u64);
        }
    }

    /// Map one finished trace; `index` maps span ids to their place in `spans`.
    pub(crate) fn trace(
        &mut self,
        spans: &[Span],
        index: &HashMap<u64, usize>,
        late_tolerance_ms: i64,
        no_carrier: &NoCarrier,
        calls: &Calls,
    ) {
        let root = spans.iter().find(|s| s.parent == 0);
        for s in spans.iter().filter(|s| inbound(s)) {
            let with = arrived_with_deadline(s, no_carrier);
            let parent = index.get(&s.parent).map(|&j| &spans[j]);
            if s.repeats(parent) {
                // The request its parent records (the service's span under its sidecar's).
                continue;
            }
            let refused = matches!(s.std, StdOutcome::Unavailable)
                || s.hop.is_some_and(|h| h.outcome == Outcome::Refused);
            let after_caller = parent
                .filter(|p| outbound(p))
                .is_some_and(|c| ms_later(s.end_ns, c.end_ns) > late_tolerance_ms);
            let after_root = root
                .filter(|r| r.id != s.id)
                .is_some_and(|r| ms_later(s.end_ns, r.end_ns) > late_tolerance_ms);
            let overrun = s
                .hop
                .and_then(|h| h.overrun_ms)
                .is_some_and(|o| o > late_tolerance_ms.max(0));
            if let Some(r) = self.entry(s.service) {
                r.inbound += 1;
                r.inbound_with_deadline += u64::from(with);
                r.refused += u64::from(refused);
                r.late += u64::from(after_caller || after_root || overrun);
            }
            if let Some(caller) = parent.map(|p| p.service).filter(|&c| c != s.service) {
                self.edge(caller, s, with);
            }
            match parent {
                // Counted with the call (`Calls`).
                Some(p) if outbound(p) => {}
                // Called straight from another service's span: no client span recorded.
                Some(p) if p.service != s.service => {
                    if let Some(r) = self.entry(p.service) {
                        r.calls_out += 1;
                        r.calls_out_with_deadline += u64::from(with);
                    }
                }
                _ => {}
            }
        }
        for c in spans.iter().filter(|s| outbound(s)) {
            if c.repeats(index.get(&c.parent).map(|&j| &spans[j])) {
                // The call its parent records (an egress span under the client span).
                continue;
            }
            let with = calls.carried(c.id);
            if let Some(r) = self.entry(c.service) {
                r.calls_out += 1;
                r.calls_out_with_deadline += u64::from(with);
            }
        }
    }
}
