//! Findings from span timing alone, by OpenTelemetry's own conventions (span kind SERVER and
//! CLIENT, parent ids), on spans that carry nothing of hopbudget's:
//!
//! - **work for nobody**: a SERVER span that ended after the CLIENT span that called it (its
//!   parent) ended, so the caller had given up and the server went on; or after the trace's
//!   root span ended, so the whole request was over. Per service and per caller-to-callee
//!   edge: how many, the median and largest excess, and the total time spent for nobody;
//! - **chain depth**: how many SERVER spans deep each request went;
//! - **duration spikes** on CLIENT and SERVER spans (at least the finding's share of a span
//!   name's durations at one value: a default timeout firing), with how many of those spans
//!   ended expired or cancelled by their standard status ([`crate::audit::status`]), which tells
//!   which side timed out. A span that ended because a deadline fired (its own, or one below
//!   it in the same request: `fired.rs`) is not counted towards a spike: that is the
//!   deadline working, not a default timeout.
//!
//! The excess compares the end of a server span (on the server's clock) with the end of its
//! caller's span (on the caller's clock), so skew between hosts shifts it. Work that ends up to
//! the late-work tolerance (`--late-tolerance-ms`, 50 ms) after is not counted: a healthy
//! request's spans wind down a few ms after the answer left (the response's last bytes, the
//! handler unwinding, span export), 10-30 ms on a loaded two-core host. Memory is per service, edge and span name, never per trace.

use foldhash::HashMap;

use super::fired::Fired;
use crate::audit::histogram::Histogram;
use crate::audit::span::{Span, Sym};
use crate::audit::status::StdOutcome;

/// Work that went on after someone stopped waiting for it.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Excess {
    /// Spans compared.
    pub(crate) of: u64,
    /// Of which ended later than what they were compared with.
    pub(crate) count: u64,
    /// How much later (ms).
    pub(crate) excess: Histogram,
    /// The sum of it (ms): time spent for nobody.
    pub(crate) total_ms: u64,
    #[serde(with = "crate::audit::serde_as::hex_id")]
    pub(crate) example: Option<u128>,
}

impl Excess {
    fn add(&mut self, late_ms: i64, tolerance_ms: i64, trace: u128) {
        self.of += 1;
        if late_ms > tolerance_ms {
            self.count += 1;
            self.excess.add(late_ms as u64);
            self.total_ms += late_ms as u64;
            self.example.get_or_insert(trace);
        }
    }
}

/// One service's server spans, timed.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct ServiceTiming {
    pub(crate) server_spans: u64,
    /// Compared with the CLIENT span that called it.
    pub(crate) after_caller: Excess,
    /// Compared with the trace's root span.
    pub(crate) after_root: Excess,
    /// Its callers (services) whose client span ended first, and how often.
    #[serde(with = "crate::audit::serde_as::pairs")]
    pub(crate) late_for: HashMap<Sym, u64>,
    /// Server and client spans by their standard outcome ([`StdOutcome`] order).
    #[serde(with = "crate::audit::serde_as::pairs")]
    pub(crate) server_outcomes: HashMap<StdOutcome, u64>,
    #[serde(with = "crate::audit::serde_as::pairs")]
    pub(crate) client_outcomes: HashMap<StdOutcome, u64>,
    /// Client spans that recorded a timeout exception: this service gave up on its own
    /// timeout.
    pub(crate) client_gave_up: u64,
    /// The depths its server spans were seen at (1 is the first server of a request): the
    /// report shows the median.
    pub(crate) depths: Histogram,
}

impl ServiceTiming {
    /// Its typical depth: the median of the depths its server spans were seen at.
    pub(crate) fn depth(&self) -> Option<u32> {
        self.depths.quantile(0.5).map(|d| d as u32)
    }
}

/// A span name of one service and kind: its durations, for spikes.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct SpanTiming {
    pub(crate) durations: Histogram,
    /// Durations of the spans whose own timeout fired (a timeout exception on them).
    pub(crate) own_timeout: Histogram,
    /// Durations of the other spans that ended expired or cancelled by their status code
    /// (answered 504, 499, DEADLINE_EXCEEDED, CANCELLED).
    pub(crate) answered: Histogram,
    /// Spans left out because they lasted their own budget.
    pub(crate) at_budget: u64,
}

/// Everything timing keeps across traces.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct TimingAcc {
    #[serde(with = "crate::audit::serde_as::pairs")]
    pub(crate) services: HashMap<Sym, ServiceTiming>,
    /// (caller service, server service): the server span compared with the caller's span.
    #[serde(with = "crate::audit::serde_as::pairs")]
    pub(crate) edges: HashMap<(Sym, Sym), Excess>,
    /// (service, span name, kind 2 server or 3 client).
    #[serde(with = "crate::audit::serde_as::pairs")]
    pub(crate) spans: HashMap<(Sym, Sym, u8), SpanTiming>,
    /// Per trace, the most SERVER spans on one path.
    pub(crate) depth: Histogram,
    /// Server spans with a caller span or a root to be timed against.
    pub(crate) timed: u64,
}

const SERVER: u8 = 2;
const CLIENT: u8 = 3;
/// Distinct services, edges and span names kept (past it, new ones are not timed).
const MAX_KEYS: usize = 10_000;

fn ms_later(end_ns: u64, than_ns: u64) -> i64 {
    ((i128::from(end_ns) - i128::from(than_ns)) / 1_000_000) as i64
}

impl TimingAcc {
    /// Time one finished trace; `index` maps span ids to their place in `spans`. A server
    /// span that ended at most `tolerance_ms` after its caller or the root is not late (the
    /// late-work tolerance, `--late-tolerance-ms`).
    pub(crate) fn trace(
        &mut self,
        spans: &[Span],
        index: &HashMap<u64, usize>,
        fired: &Fired,
        tolerance_ms: i64,
    ) {
        let root = spans.iter().find(|s| s.parent == 0);
        let mut deepest = 0u32;
        let depths = server_depths(spans, index);
        for (i, s) in spans.iter().enumerate() {
            if s.kind != SERVER && s.kind != CLIENT {
                continue;
            }
            if self.spans.len() < MAX_KEYS || self.spans.contains_key(&(s.service, s.name, s.kind))
            {
                let t = self.spans.entry((s.service, s.name, s.kind)).or_default();
                if fired.at_deadline(i) {
                    t.at_budget += 1;
                } else if s.hop.is_none() {
                    // A hop span's spikes are the hop table's (`report::findings`); an egress
                    // span's are those of the client span it carried.
                    t.durations.add(s.duration_ms());
                    if s.own_timeout {
                        t.own_timeout.add(s.duration_ms());
                    } else if matches!(s.std, StdOutcome::Expired | StdOutcome::Cancelled) {
                        t.answered.add(s.duration_ms());
                    }
                }
            }
            if self.services.len() >= MAX_KEYS && !self.services.contains_key(&s.service) {
                continue;
            }
            if s.repeats(index.get(&s.parent).map(|&j| &spans[j])) {
                // Counted once, as its parent (the sidecar's span, or the service's).
                continue;
            }
            let svc = self.services.entry(s.service).or_default();
            if s.kind == CLIENT {
                *svc.client_outcomes.entry(s.std).or_default() += 1;
                svc.client_gave_up += u64::from(s.own_timeout);
                continue;
            }
            svc.server_spans += 1;
            *svc.server_outcomes.entry(s.std).or_default() += 1;
            let depth = depths[i];
            svc.depths.add(u64::from(depth));
            deepest = deepest.max(depth);
            let caller = index
                .get(&s.parent)
                .map(|&j| &spans[j])
                .filter(|p| p.kind == CLIENT);
            let mut timed = false;
            if let Some(c) = caller {
                timed = true;
                let late = ms_later(s.end_ns, c.end_ns);
                svc.after_caller.add(late, tolerance_ms, s.trace);
                if late > tolerance_ms {
                    *svc.late_for.entry(c.service).or_default() += 1;
                }
                if self.edges.len() < MAX_KEYS || self.edges.contains_key(&(c.service, s.service)) {
                    self.edges.entry((c.service, s.service)).or_default().add(
                        late,
                        tolerance_ms,
                        s.trace,
                    );
                }
            }
            if let Some(r) = root.filter(|r| r.id != s.id) {
                timed = true;
                let svc = self.services.entry(s.service).or_default();
                svc.after_root
                    .add(ms_later(s.end_ns, r.end_ns), tolerance_ms, s.trace);
            }
            self.timed += u64::from(timed);
        }
        if deepest > 0 {
            self.depth.add(u64::from(deepest));
        }
    }
}

/// Per span, how many SERVER spans are on the path from the root to it, itself included
/// (a SERVER span directly under one of its own service's counts once with it: a service
/// behind its sidecar is one hop, [`Span::repeats`]);
/// each span's depth is found once (a walk up to the first ancestor already known), so a
/// trace costs time linear in its spans, however deep. A cycle of parent ids stops the walk.
fn server_depths(spans: &[Span], index: &HashMap<u64, usize>) -> Vec<u32> {
    const UNKNOWN: u32 = u32::MAX;
    let mut depth = vec![UNKNOWN; spans.len()];
    let mut path = Vec::new();
    for i in 0..spans.len() {
        let mut j = i;
        let mut base = 0;
        while depth[j] == UNKNOWN {
            path.push(j);
            depth[j] = UNKNOWN - 1; // on the path: a cycle ends here
            match index.get(&spans[j].parent) {
                Some(&p) if spans[j].parent != 0 => j = p,
                _ => break,
            }
        }
        if depth[j] < UNKNOWN - 1 {
            base = depth[j];
        }
        while let Some(k) = path.pop() {
            let parent = index.get(&spans[k].parent).map(|&p| &spans[p]);
            base += u32::from(spans[k].kind == SERVER && !spans[k].repeats(parent));
            depth[k] = base;
        }
    }
    depth
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::analysis::analyze::{Accumulated, AnalyzeSettings};
    use crate::audit::analysis::group::Finish;
    use crate::audit::histogram::spike;
    use crate::audit::span::{HopAttrs, Interner, Outcome};

    fn span(names: &mut Interner, trace: u128, kind: u8, dur_ms: u64) -> Span {
        Span {
            trace,
            id: 1,
            parent: 0,
            service: names.intern("svc"),
            name: names.intern("GET /x"),
            kind,
            start_ns: 1_000_000_000,
            end_ns: 1_000_000_000 + dur_ms * 1_000_000,
            hop: None,
            std: StdOutcome::Unknown,
            deadline_header: false,
            header_ms: None,
            own_timeout: false,
            proxy: Default::default(),
            peer: None,
        }
    }

    /// 10 of 40 spans end at their own 300 ms budget: the deadline firing, not a default
    /// timeout, whether the budget is a hop's `deadline.remaining_ms` or a received header.
    #[test]
    fn a_cluster_at_the_hops_own_budget_is_no_spike() {
        let mut names = Interner::new(100);
        let mut acc = Accumulated::new(AnalyzeSettings {
            tolerance_ms: 2,
            late_tolerance_ms: 50,
            max_hops: 100,
        });
        for t in 1..=40u128 {
            let dur = if t % 4 == 0 { 301 } else { 20 + (t as u64 % 7) };
            let mut hop = span(&mut names, t, SERVER, dur);
            hop.hop = Some(HopAttrs {
                remaining_ms: Some(300),
                source: Some(names.intern("relative-ms")),
                margin_ms: None,
                outcome: Outcome::Completed,
                required_ms: None,
                overrun_ms: None,
                told_ms: None,
                matched: None,
            });
            let mut plain = span(&mut names, t + 1_000, SERVER, dur);
            plain.header_ms = Some(300);
            acc.trace(&[hop], Finish::Complete, &names);
            acc.trace(&[plain], Finish::Complete, &names);
        }
        let key = (
            names.lookup("svc").unwrap(),
            names.lookup("GET /x").unwrap(),
        );
        let h = &acc.hops[&key];
        assert!(spike(&h.durations, 5).is_some(), "there is a cluster");
        assert_eq!(spike(&h.spike_durations, 5), None);
        let t = &acc.timing.spans[&(key.0, key.1, SERVER)];
        assert_eq!(t.at_budget, 20);
        assert_eq!(spike(&t.durations, 5), None);
    }

    #[test]
    fn server_depth_counts_server_spans_on_the_path_and_survives_a_cycle() {
        let mut names = Interner::new(10);
        let mk = |names: &mut Interner, id, parent, kind| {
            let mut s = span(names, 1, kind, 10);
            s.id = id;
            s.parent = parent;
            s
        };
        // root client 1 -> server 2 -> client 3 -> server 4 -> internal 5; 6 <-> 7 a cycle.
        let spans = [
            mk(&mut names, 5, 4, 1),
            mk(&mut names, 4, 3, SERVER),
            mk(&mut names, 3, 2, CLIENT),
            mk(&mut names, 2, 1, SERVER),
            mk(&mut names, 1, 0, CLIENT),
            mk(&mut names, 6, 7, SERVER),
            mk(&mut names, 7, 6, SERVER),
        ];
        let index = spans.iter().enumerate().map(|(i, s)| (s.id, i)).collect();
        let d = server_depths(&spans, &index);
        assert_eq!(&d[..5], [2, 2, 1, 1, 0]);
        assert!(d[5] <= 2 && d[6] <= 2, "{d:?}");
    }
}
