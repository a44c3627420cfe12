//! The per-trace analysis and what it accumulates across traces.
//!
//! For one finished trace: link each hop span (a span with `deadline.*` attributes) to the
//! nearest hop span above it (its caller's hop, across any client or handler spans in
//! between), which gives each request's hop tree and each hop's depth; then compare each
//! hop's budget with what its caller had left when it called. Only per-hop and per-depth
//! counters survive the trace, so memory grows with the number of distinct hops (service and
//! route), never with the number of traces.
//!
//! One file, though over 500 lines with its tests: one pass over a trace
//! (`Accumulated::trace`) and the counters it fills, which the other families' passes run
//! from.

use foldhash::{HashMap, HashMapExt};

use super::calls::Calls;
use super::calls::NoCarrier;
use super::fired::Fired;
use super::group::Finish;
use super::header_reset::HeaderResetAcc;
use super::rollout::RolloutAcc;
use super::timing::TimingAcc;
use super::told::ToldAcc;
pub(crate) use crate::audit::histogram::Histogram;
use crate::audit::span::{Interner, Outcome, Proxy, Span, Sym};

/// A hop as the report names it: its service and its span name (route).
pub(crate) type HopKey = (Sym, Sym);

/// What is known about one hop (service and route) across traces.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct HopAcc {
    pub(crate) spans: u64,
    /// completed, refused, expired, cancelled, unknown.
    pub(crate) outcomes: [u64; 5],
    pub(crate) remaining: Histogram,
    pub(crate) durations: Histogram,
    /// Durations of the spans that did not last their own budget: a spike among these is a
    /// timeout other than the deadline (a default firing), never the deadline itself.
    pub(crate) spike_durations: Histogram,
    #[serde(with = "crate::audit::serde_as::pairs")]
    pub(crate) sources: HashMap<Sym, u64>,
    /// Arrived without a deadline at the edge of the trace (C8: the client sent none).
    pub(crate) missing_at_root: u64,
    /// Arrived without a deadline below another hop: a caller did not forward it.
    pub(crate) missing_inner: u64,
    pub(crate) late: u64,
    pub(crate) overrun: Histogram,
    pub(crate) required_max: Option<i64>,
    /// Arrivals with more budget than the caller had left (S13).
    pub(crate) resets: u64,
    /// Arrivals compared with their caller's budget.
    pub(crate) compared: u64,
    pub(crate) reset_gain_max: i64,
    /// How much each reset added (ms): its median sets the finding's severity.
    pub(crate) reset_gains: Histogram,
    #[serde(with = "crate::audit::serde_as::pairs")]
    pub(crate) reset_from: HashMap<HopKey, u64>,
    #[serde(with = "crate::audit::serde_as::pairs")]
    pub(crate) reset_below: HashMap<HopKey, u64>,
    #[serde(with = "crate::audit::serde_as::hex_id")]
    pub(crate) reset_example: Option<u128>,
    /// Arrivals through a sidecar (an ingress span, or called through an egress span) told
    /// more than the caller had left: judged, and reported, by [`super::told`] (C26).
    pub(crate) told_more: u64,
    /// The depths it was seen at: the report shows the median (a health check that calls
    /// it directly must not make it look shallow).
    pub(crate) depths: Histogram,
}

impl HopAcc {
    /// Its typical depth: the median of the depths it was seen at.
    pub(crate) fn depth(&self) -> Option<u32> {
        self.depths.quantile(0.5).map(|d| d as u32)
    }
}

/// One caller-to-callee edge of the hop tree, summed over traces.
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct EdgeAcc {
    pub(crate) calls: u64,
    pub(crate) resets: u64,
}

/// Hops and refusals at one depth of the hop tree (the entry hop is depth 0).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct DepthAcc {
    pub(crate) hops: u64,
    pub(crate) refused: u64,
    #[serde(with = "crate::audit::serde_as::pairs")]
    pub(crate) refused_by_hop: HashMap<HopKey, u64>,
}

/// Clock offset samples between two services that carry the deadline as an epoch instant.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct OffsetAcc {
    pub(crate) samples: u64,
    pub(crate) min: Option<i64>,
    pub(crate) all: Histogram,
}

/// Settings of the analysis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct AnalyzeSettings {
    /// How much more than its caller had left a hop may start with before it counts as a
    /// reset: absorbs millisecond rounding (and skew, if a proxy's span sits between).
    pub(crate) tolerance_ms: i64,
    /// Work that ended at most this long after its caller, the request's root or its
    /// deadline is not late: the wind-down of a healthy request (`--late-tolerance-ms`).
    pub(crate) late_tolerance_ms: i64,
    /// Cap on distinct hops kept.
    pub(crate) max_hops: usize,
}

/// Everything kept across traces.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct Accumulated {
    pub(crate) settings: AnalyzeSettings,
    #[serde(with = "crate::audit::serde_as::pairs")]
    pub(crate) hops: HashMap<HopKey, HopAcc>,
    pub(crate) hops_overflowed: u64,
    #[serde(with = "crate::audit::serde_as::pairs")]
    pub(crate) edges: HashMap<(HopKey, HopKey), EdgeAcc>,
    #[serde(with = "crate::audit::serde_as::pairs")]
    pub(crate) roots: HashMap<HopKey, u64>,
    pub(crate) depths: Vec<DepthAcc>,
    pub(crate) entry_budget: Histogram,
    /// `required - remaining` of refused hops: how much more they needed.
    pub(crate) shortfall: Histogram,
    #[serde(with = "crate::audit::serde_as::pairs")]
    pub(crate) offsets: HashMap<(Sym, Sym), OffsetAcc>,
    pub(crate) traces_complete: u64,
    pub(crate) traces_partial: u64,
    pub(crate) hop_spans: u64,
    /// Spans that carry a captured deadline header (`http.request.header.*`).
    pub(crate) header_spans: u64,
    pub(crate) detached_edges: u64,
    /// What span timing alone shows ([`TimingAcc`]).
    pub(crate) timing: TimingAcc,
    /// Resets and drops read from captured deadline headers ([`HeaderResetAcc`]).
    pub(crate) header_resets: HeaderResetAcc,
    /// The rollout map, per service ([`RolloutAcc`]).
    pub(crate) rollout: RolloutAcc,
    /// Spans `hopbudget proxy` emitted (`hopbudget.proxy`): something to judge, even where
    /// only egress spans (calls, not hops) were exported.
    pub(crate) sidecar_spans: u64,
    /// What each hop was told against what its caller had left, and calls that matched no
    /// request ([`ToldAcc`], C26).
    pub(crate) told: ToldAcc,
}

const MAX_DEPTH: usize = 64;

#[derive(Clone, Copy)]
enum Link {
    NotHop,
    Root,
    /// The caller's hop span, and the span directly above this hop (in the caller's
    /// process: its client span, a handler span, or the caller's hop span itself).
    Hop {
        parent: usize,
        bracket: usize,
    },
    Missing,
}

/// The source names the analysis looks for.
struct SourceKinds {
    missing: [Option<Sym>; 2],
    detached: Option<Sym>,
    epoch: Option<Sym>,
}

impl Accumulated {
    pub(crate) fn new(settings: AnalyzeSettings) -> Self {
        Self {
            settings,
            hops: HashMap::new(),
            hops_overflowed: 0,
            edges: HashMap::new(),
            roots: HashMap::new(),
            depths: Vec::new(),
            entry_budget: Histogram::default(),
            shortfall: Histogram::default(),
            offsets: HashMap::new(),
            traces_complete: 0,
            traces_partial: 0,
            hop_spans: 0,
            header_spans: 0,
            detached_edges: 0,
            timing: TimingAcc::default(),
            header_resets: HeaderResetAcc::default(),
            rollout: RolloutAcc::default(),
            sidecar_spans: 0,
            told: ToldAcc::default(),
        }
    }

    fn key(&mut self, span: &Span) -> HopKey {
        let key = (span.service, span.name);
        if self.hops.contains_key(&key) || self.hops.len() < self.settings.max_hops {
            key
        } else {
            self.hops_overflowed += 1;
            (Interner::OVERFLOW, Interner::OVERFLOW)
        }
    }

    /// Audit one finished trace.
    pub(crate) fn trace(&mut self, spans: &[Span], how: Finish, names: &Interner) {
        let kinds = SourceKinds {
            missing: [names.lookup("fallback"), names.lookup("none")],
            detached: names.lookup("detached"),
            epoch: names.lookup("epoch-ms"),
        };
        let index: HashMap<u64, usize> = spans.iter().enumerate().map(|(i, s)| (s.id, i)).collect();
        let fired = Fired::of_trace(spans, &index);
        self.timing
            .trace(spans, &index, &fired, self.settings.late_tolerance_ms);
        self.told
            .trace(spans, &index, kinds.epoch, self.settings.tolerance_ms);
        let no_carrier = NoCarrier::new(names);
        let calls = Calls::of_trace(spans, &no_carrier);
        self.rollout.trace(
            spans,
            &index,
            self.settings.late_tolerance_ms,
            &no_carrier,
            &calls,
        );
        self.header_resets
            .trace(spans, &index, &calls, self.settings.tolerance_ms);
        let links: Vec<Link> = (0..spans.len()).map(|i| link(spans, &index, i)).collect();
        let mut partial = how != Finish::Complete;
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); spans.len()];
        for (i, l) in links.iter().enumerate() {
            match *l {
                Link::Hop { parent, .. } => children[parent].push(i),
                Link::Missing => partial = true,
                _ => {}
            }
        }
        if partial {
            self.traces_partial += 1;
        } else {
            self.traces_complete += 1;
        }
        let depth_of = |mut i: usize| -> Option<u32> {
            let mut d = 0u32;
            loop {
                match links[i] {
                    Link::Root => return Some(d),
                    Link::Hop { parent, .. } => {
                        d += 1;
                        i = parent;
                        if d as usize > spans.len() {
                            return None;
                        }
                    }
                    Link::Missing | Link::NotHop => return None,
                }
            }
        };
        for (i, s) in spans.iter().enumerate() {
            self.header_spans += u64::from(s.deadline_header);
            self.sidecar_spans += u64::from(s.proxy != Proxy::None);
            let Some(hop) = s.hop_attrs() else { continue };
            self.hop_spans += 1;
            let key = self.key(s);
            let depth = depth_of(i);
            let link = links[i];
            // Ended because a deadline fired (its own, or one below it): the deadline working,
            // unless that budget was a reset (counted below, once the reset is known).
            let at_budget = fired.at_deadline(i);
            let is_missing = hop.remaining_ms.is_none()
                || (hop.source.is_some() && kinds.missing.contains(&hop.source));
            let outcome_slot = match hop.outcome {
                Outcome::Completed => 0,
                Outcome::Refused => 1,
                Outcome::Expired => 2,
                Outcome::Cancelled => 3,
                Outcome::Unknown => 4,
            };
            {
                let acc = self.hops.entry(key).or_default();
                acc.spans += 1;
                acc.outcomes[outcome_slot] += 1;
                if let Some(r) = hop.remaining_ms {
                    acc.remaining.add(r.max(0) as u64);
                }
                acc.durations.add(s.duration_ms());
                if !at_budget {
                    acc.spike_durations.add(s.duration_ms());
                }
                if let Some(src) = hop.source {
                    *acc.sources.entry(src).or_default() += 1;
                }
                if is_missing {
                    if matches!(link, Link::Root) {
                        acc.missing_at_root += 1;
                    } else {
                        acc.missing_inner += 1;
                    }
                }
                if let Some(o) = hop
                    .overrun_ms
                    .filter(|&o| o > self.settings.late_tolerance_ms.max(0))
                {
                    acc.late += 1;
                    acc.overrun.add(o as u64);
                }
                if let Some(req) = hop.required_ms {
                    acc.required_max = Some(acc.required_max.map_or(req, |m| m.max(req)));
                }
                if let Some(d) = depth {
                    acc.depths.add(u64::from(d));
                }
            }
            if let Some(d) = depth {
                let d = (d as usize).min(MAX_DEPTH);
                if self.depths.len() <= d {
                    self.depths.resize_with(d + 1, DepthAcc::default);
                }
                let at = &mut self.depths[d];
                at.hops += 1;
                if hop.outcome == Outcome::Refused {
                    at.refused += 1;
                    *at.refused_by_hop.entry(key).or_default() += 1;
                    if let (Some(req), Some(rem)) = (hop.required_ms, hop.remaining_ms) {
                        self.shortfall.add((req - rem).max(0) as u64);
                    }
                }
            }
            match link {
                Link::Root => {
                    *self.roots.entry(key).or_default() += 1;
                    if let Some(r) = hop.remaining_ms {
                        self.entry_budget.add(r.max(0) as u64);
                    }
                }
                Link::Hop { parent, bracket } => {
                    let p = &spans[parent];
                    let pkey = self.key(p);
                    let edge = self.edges.entry((pkey, key)).or_default();
                    edge.calls += 1;
                    let phop = p.hop_attrs().unwrap_or(hop);
                    let (Some(prem), Some(crem)) = (phop.remaining_ms, hop.remaining_ms) else {
                        continue;
                    };
                    if hop.source.is_some() && hop.source == kinds.detached {
                        // Background work has its own deadline, rooted when scheduled (C12).
                        self.detached_edges += 1;
                        continue;
                    }
                    // When the caller called, it had at most `prem` less the time from its
                    // own start to the start of the span the call was made in: both
                    // timestamps come from the caller's process, so clock skew between hosts
                    // and queueing before the callee's span opened cannot fake a reset.
                    let b = &spans[bracket];
                    let called_after = ms_between(p.start_ns, b.start_ns).max(0);
                    let left = prem - called_after;
                    // Through a sidecar, what the callee was told is what the egress stamped
                    // (a number from the caller's host: no skew); the arrival otherwise.
                    let via_sidecar = s.proxy == Proxy::Ingress || b.is_egress();
                    let told = b
                        .hop
                        .and_then(|h| h.told_ms)
                        .filter(|_| b.is_egress())
                        .unwrap_or(crem);
                    let gain = told - left;
                    let reset = gain > self.settings.tolerance_ms;
                    if reset {
                        edge.resets += 1;
                    }
                    if via_sidecar {
                        // Any increase is an error there, with its own finding (`told`).
                        let acc = self.hops.entry(key).or_default();
                        acc.told_more += u64::from(reset);
                        continue;
                    }
                    if reset && at_budget {
                        // A budget made up below a chain break is a default, not its own.
                        let acc = self.hops.entry(key).or_default();
                        acc.spike_durations.add(s.duration_ms());
                    }
                    if hop.source.is_some() && hop.source == kinds.epoch {
                        let sample = left - phop.margin_ms.unwrap_or(0) - crem;
                        let o = self.offsets.entry((p.service, s.service)).or_default();
                        o.samples += 1;
                        o.min = Some(o.min.map_or(sample, |m| m.min(sample)));
                        o.all.add((sample + 1_000_000).max(0) as u64);
                    }
                    let below = if reset {
                        let mut below: Vec<HopKey> = Vec::new();
                        let mut stack = children[i].clone();
                        let mut steps = 0;
                        while let Some(j) = stack.pop() {
                            steps += 1;
                            if steps > spans.len() {
                                break;
                            }
                            let k = (spans[j].service, spans[j].name);
                            if !below.contains(&k) {
                                below.push(k);
                            }
                            stack.extend_from_slice(&children[j]);
                        }
                        below
                    } else {
                        Vec::new()
                    };
                    let acc = self.hops.entry(key).or_default();
                    acc.compared += 1;
                    if reset {
                        acc.resets += 1;
                        acc.reset_gain_max = acc.reset_gain_max.max(gain);
                        acc.reset_gains.add(gain.max(0) as u64);
                        *acc.reset_from.entry(pkey).or_default() += 1;
                        for k in below {
                            *acc.reset_below.entry(k).or_default() += 1;
                        }
                        acc.reset_example.get_or_insert(s.trace);
                    }
                }
                Link::Missing | Link::NotHop => {}
            }
        }
    }
}

fn ms_between(from_ns: u64, to_ns: u64) -> i64 {
    let d = i128::from(to_ns) - i128::from(from_ns);
    i64::try_from(d.div_euclid(1_000_000)).unwrap_or(if d < 0 {
        i64::MIN / 2
    } else {
        i64::MAX / 2
    })
}

fn link(spans: &[Span], index: &HashMap<u64, usize>, i: usize) -> Link {
    if spans[i].hop_attrs().is_none() {
        return Link::NotHop;
    }
    let mut parent = spans[i].parent;
    let mut bracket = None;
    for _ in 0..spans.len() {
        if parent == 0 {
            return Link::Root;
        }
        let Some(&j) = index.get(&parent) else {
            return Link::Missing;
        };
        if j == i {
            return Link::Missing;
        }
        let bracket = *bracket.get_or_insert(j);
        if spans[j].hop_attrs().is_some() {
            return Link::Hop { parent: j, bracket };
        }
        parent = spans[j].parent;
    }
    // A cycle of parent ids: not a tree.
    Link::Missing
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::span::HopAttrs;

    fn hop(
        names: &mut Interner,
        id: u64,
        parent: u64,
        service: &str,
        start_ms: u64,
        remaining: i64,
    ) -> Span {
        Span {
            trace: 7,
            id,
            parent,
            service: names.intern(service),
            name: names.intern(service),
            kind: 2,
            start_ns: start_ms * 1_000_000,
            end_ns: (start_ms + 10) * 1_000_000,
            hop: Some(HopAttrs {
                remaining_ms: Some(remaining),
                source: Some(names.intern("relative-ms")),
                margin_ms: Some(5),
                outcome: Outcome::Completed,
                required_ms: None,
                overrun_ms: None,
                told_ms: None,
                matched: None,
            }),
            std: Default::default(),
            deadline_header: false,
            header_ms: None,
            own_timeout: false,
            proxy: Default::default(),
            peer: None,
        }
    }

    #[test]
    fn a_hop_with_more_than_its_caller_had_left_is_a_reset() {
        let mut names = Interner::new(100);
        let mut client = hop(&mut names, 3, 2, "a", 10, 0);
        client.hop = None; // a client span between the two hops
        let spans = [
            hop(&mut names, 2, 0, "a", 0, 500),
            client,
            hop(&mut names, 4, 3, "b", 100, 2_000),
            hop(&mut names, 5, 4, "c", 110, 1_900),
        ];
        let mut acc = Accumulated::new(AnalyzeSettings {
            tolerance_ms: 10,
            late_tolerance_ms: 0,
            max_hops: 100,
        });
        acc.trace(&spans, Finish::Complete, &names);
        let b = &acc.hops[&(names.lookup("b").unwrap(), names.lookup("b").unwrap())];
        assert_eq!(b.resets, 1);
        assert_eq!(b.reset_gain_max, 2_000 - 490);
        assert_eq!(b.reset_below.len(), 1);
        let c = &acc.hops[&(names.lookup("c").unwrap(), names.lookup("c").unwrap())];
        assert_eq!((c.resets, c.compared), (0, 1));
        assert_eq!(acc.depths.len(), 3);
        assert_eq!(acc.traces_complete, 1);
    }
}
