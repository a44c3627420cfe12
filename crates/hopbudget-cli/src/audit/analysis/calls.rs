//! Which of a trace's outbound calls carried a deadline: one answer for the rollout map
//! ([`super::rollout`]) and the dropped-deadline findings ([`super::header_reset`]), so that
//! the two never disagree on one run (#45 item 4).
//!
//! A call (a CLIENT or PRODUCER span) carried a deadline when its span captured a deadline
//! header, when the callee's inbound span directly below it arrived with one, or when a
//! sidecar's egress span directly below it (the same call, seen by the sidecar) stamped one
//! (`deadline.told_ms`) or reached a callee that arrived with one. A service behind
//! `hopbudget proxy` does not forward the header itself: its egress does.
//!
//! What counts as an inbound or an outbound span, and when an inbound one arrived with a
//! deadline, is defined here too: the rollout map counts by the same words.

use foldhash::{HashMap, HashSet};

use crate::audit::span::{Interner, Span, Sym};

const SERVER: u8 = 2;
const CLIENT: u8 = 3;
const PRODUCER: u8 = 4;
const CONSUMER: u8 = 5;

/// A request that arrived: a SERVER or CONSUMER span, or a hop span that is no client.
pub(crate) fn inbound(s: &Span) -> bool {
    s.kind == SERVER || s.kind == CONSUMER || (s.hop.is_some() && s.kind != CLIENT)
}

/// A call made: a CLIENT or PRODUCER span.
pub(crate) fn outbound(s: &Span) -> bool {
    s.kind == CLIENT || s.kind == PRODUCER
}

/// The source names that mean "no deadline arrived".
pub(crate) struct NoCarrier([Option<Sym>; 4]);

impl NoCarrier {
    pub(crate) fn new(names: &Interner) -> Self {
        Self(["fallback", "none", "local", "detached"].map(|n| names.lookup(n)))
    }
}

/// Whether the inbound span `s` arrived with a deadline: its hop attributes name a carrier,
/// or it captured a deadline header.
pub(crate) fn arrived_with_deadline(s: &Span, no_carrier: &NoCarrier) -> bool {
    match s.hop {
        Some(h) => h
            .source
            .is_some_and(|src| !no_carrier.0.contains(&Some(src))),
        None => s.deadline_header,
    }
}

/// The trace's outbound calls that carried a deadline, and each call's egress span.
pub(crate) struct Calls {
    carried: HashSet<u64>,
    /// Client span id -> the place of the sidecar's egress span of the same call.
    egress: HashMap<u64, usize>,
}

impl Calls {
    /// Work out the calls of one trace.
    pub(crate) fn of_trace(spans: &[Span], no_carrier: &NoCarrier) -> Self {
        // A trace of hop spans alone (the library's own) records no call spans: nothing to
        // work out, and no set to build.
        if !spans.iter().any(outbound) {
            return Self {
                carried: HashSet::default(),
                egress: HashMap::default(),
            };
        }
        // Sized once: growing a set costs more than the whole pass on a small trace.
        let mut carried = HashSet::with_capacity_and_hasher(spans.len(), Default::default());
        let mut egress = HashMap::default();
        for s in spans.iter().filter(|s| inbound(s)) {
            if arrived_with_deadline(s, no_carrier) {
                carried.insert(s.parent);
            }
        }
        for s in spans.iter().filter(|s| outbound(s)) {
            if s.deadline_header || (s.is_egress() && s.hop.is_some_and(|h| h.told_ms.is_some())) {
                carried.insert(s.id);
            }
        }
        // An egress span's answer is its client span's: it is the same call.
        for (i, s) in spans.iter().enumerate().filter(|(_, s)| s.is_egress()) {
            egress.entry(s.parent).or_insert(i);
            if carried.contains(&s.id) {
                carried.insert(s.parent);
            }
        }
        carried.remove(&0);
        Self { carried, egress }
    }

    /// Whether the outbound span `id` carried a deadline.
    pub(crate) fn carried(&self, id: u64) -> bool {
        self.carried.contains(&id)
    }

    /// The place of the egress span of the call `id` (a client span), if a sidecar saw it.
    pub(crate) fn egress_of(&self, id: u64) -> Option<usize> {
        self.egress.get(&id).copied()
    }
}
