//! What the HTML report draws ([`crate::audit::report::page::html`]): the call graph between
//! services, each service's durations and its work for nobody. Built from the same counters
//! as the findings; `--json` leaves it out (the tables there already hold the figures).

use foldhash::{HashMap, HashMapExt};

use super::rules::FindingRules;
use crate::audit::analysis::analyze::Accumulated;
use crate::audit::histogram::{Histogram, spike};
use crate::audit::span::{Interner, Sym};

/// What a service does with the budget it is handed, as the call graph colours it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Handling {
    /// Passes on what it has left (or, at the entry, sets a deadline and passes it on).
    Forwards,
    /// Tells a callee more than it had left: a chain break (S13).
    Resets,
    /// Received a deadline and made calls that carried none (C8).
    Drops,
    /// Neither received nor sent a deadline.
    NoDeadline,
}

impl Handling {
    /// Its name in the page: the node's CSS class is `node-` and this.
    pub fn name(self) -> &'static str {
        match self {
            Handling::Forwards => "forwards",
            Handling::Resets => "resets",
            Handling::Drops => "drops",
            Handling::NoDeadline => "no-deadline",
        }
    }

    /// All four, in the legend's order.
    pub const ALL: [Handling; 4] = [
        Handling::Forwards,
        Handling::Resets,
        Handling::Drops,
        Handling::NoDeadline,
    ];
}

/// One service, as drawn.
#[derive(Clone, Debug)]
pub struct ServicePicture {
    /// Service name.
    pub service: String,
    /// What it does with the budget.
    pub handling: Handling,
    /// Its column in the call graph: the longest chain of callers above it.
    pub layer: u32,
    /// Its row in that column (rows may be left empty, to keep a chain level).
    pub row: u32,
    /// Durations of its inbound requests (hop spans and server spans): (ms, count), sorted.
    pub durations: Vec<(u64, u64)>,
    /// Durations at which many of its requests ended at one value: a default timeout firing
    /// (the same test as the timeout-spike finding).
    pub spikes_ms: Vec<u64>,
    /// Time its server spans went on after their caller had ended, summed (ms).
    pub for_nobody_ms: u64,
    /// How many of its server spans did.
    pub for_nobody_calls: u64,
}

/// One caller-to-callee edge of the call graph.
#[derive(Clone, Debug)]
pub struct GraphEdge {
    /// Calling service.
    pub caller: String,
    /// Called service.
    pub callee: String,
    /// Requests.
    pub calls: u64,
    /// The median budget the callee was told on arrival (ms); `None` when none arrived with
    /// one.
    pub told_p50_ms: Option<u64>,
}

/// Everything the page draws.
#[derive(Clone, Debug, Default)]
pub struct Pictures {
    /// The services, by layer, then in drawing order within it.
    pub services: Vec<ServicePicture>,
    /// The edges between them.
    pub edges: Vec<GraphEdge>,
}

/// The services that reset the budget: a hop that started with more than its caller had left
/// (it ignored what it was told and set its own, S13), and the caller of a header edge or a
/// sidecar's edge that told the callee more than it had.
struct Resetters {
    /// By hop attributes: the hop itself.
    hops: Vec<Sym>,
    /// By what was sent: the caller.
    senders: Vec<Sym>,
}

impl Resetters {
    fn of(acc: &Accumulated) -> Self {
        let hops = acc
            .hops
            .iter()
            .filter(|(_, h)| h.resets > 0)
            .map(|(k, _)| k.0)
            .collect();
        let header = acc
            .header_resets
            .edges
            .iter()
            .filter(|(_, e)| e.resets > 0)
            .map(|(k, _)| k.0);
        let told = acc
            .told
            .edges
            .iter()
            .filter(|(_, e)| e.more > 0)
            .map(|(k, _)| k.0);
        Resetters {
            hops,
            senders: header.chain(told).collect(),
        }
    }

    fn contains(&self, s: Sym) -> bool {
        self.hops.contains(&s) || self.senders.contains(&s)
    }
}

fn handling(acc: &Accumulated, s: Sym, resetters: &Resetters) -> Handling {
    if resetters.contains(s) {
        return Handling::Resets;
    }
    let Some(r) = acc.rollout.services.get(&s) else {
        return Handling::NoDeadline;
    };
    // A call whose callee arrived without a deadline because the callee threw it away (a
    // resetting hop says where its budget came from) was not dropped by this service.
    let excused: u64 = acc
        .rollout
        .edges
        .iter()
        .filter(|(k, _)| k.0 == s && resetters.hops.contains(&k.1))
        .map(|(_, e)| e.calls - e.with_deadline.min(e.calls))
        .sum();
    let missing = r.calls_out - r.calls_out_with_deadline.min(r.calls_out);
    let header_drops = acc
        .header_resets
        .edges
        .iter()
        .any(|(k, e)| k.0 == s && e.dropped > 0);
    if r.inbound_with_deadline > 0 && (missing > excused || header_drops) {
        Handling::Drops
    } else if r.inbound_with_deadline == 0 && r.calls_out_with_deadline == 0 {
        Handling::NoDeadline
    } else {
        Handling::Forwards
    }
}

/// Columns: the longest chain of callers above each service (cycles stop at the number of
/// services).
fn layers(services: &[Sym], edges: &[(Sym, Sym)]) -> HashMap<Sym, u32> {
    let mut layer: HashMap<Sym, u32> = services.iter().map(|s| (*s, 0)).collect();
    let cap = services.len() as u32;
    for _ in 0..services.len() {
        let mut changed = false;
        for (a, b) in edges {
            let want = (layer[a] + 1).min(cap);
            if layer[b] < want {
                layer.insert(*b, want);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    layer
}

pub(crate) fn build(acc: &Accumulated, names: &Interner, rules: FindingRules) -> Pictures {
    let mut edges: Vec<(Sym, Sym)> = acc.rollout.edges.keys().copied().collect();
    let mut syms: Vec<Sym> = acc.rollout.services.keys().copied().collect();
    for (a, b) in &edges {
        syms.push(*a);
        syms.push(*b);
    }
    syms.sort_by_key(|s| names.name(*s));
    syms.dedup();
    edges.sort_by_key(|(a, b)| (names.name(*a), names.name(*b)));
    let layer = layers(&syms, &edges);
    let resetters = Resetters::of(acc);

    let mut durations: HashMap<Sym, Histogram> = HashMap::new();
    let mut spikes: HashMap<Sym, Vec<u64>> = HashMap::new();
    for ((service, _), h) in &acc.hops {
        durations
            .entry(*service)
            .or_default()
            .merge(h.durations.clone());
        if let Some((v, _)) = spike(&h.spike_durations, rules.spike_min) {
            spikes.entry(*service).or_default().push(v);
        }
    }
    for ((service, _, kind), t) in &acc.timing.spans {
        if *kind != 2 {
            continue;
        }
        durations
            .entry(*service)
            .or_default()
            .merge(t.durations.clone());
        if let Some((v, _)) = spike(&t.durations, rules.spike_min) {
            spikes.entry(*service).or_default().push(v);
        }
    }

    // Within a column, by where their callers sit (fewer crossings), then by name.
    let mut order: HashMap<Sym, f64> = HashMap::new();
    let max_layer = syms.iter().map(|s| layer[s]).max().unwrap_or(0);
    let mut placed: Vec<(Sym, u32)> = Vec::new();
    for l in 0..=max_layer {
        let mut col: Vec<(f64, &str, Sym)> = syms
            .iter()
            .filter(|s| layer[*s] == l)
            .map(|s| {
                let above: Vec<f64> = edges
                    .iter()
                    .filter(|(a, b)| b == s && order.contains_key(a))
                    .map(|(a, _)| order[a])
                    .collect();
                let at = if above.is_empty() {
                    f64::MAX
                } else {
                    above.iter().sum::<f64>() / above.len() as f64
                };
                (at, names.name(*s), *s)
            })
            .collect();
        col.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)));
        // Level with its callers where there is room, as the seeds draw a chain: a straight
        // line, not a staircase.
        let mut next = 0u32;
        for (at, _, s) in &col {
            let want = if at.is_finite() && *at < f64::MAX {
                at.round() as u32
            } else {
                0
            };
            let row = want.max(next);
            next = row + 1;
            order.insert(*s, f64::from(row));
            placed.push((*s, row));
        }
    }

    let services = placed
        .into_iter()
        .map(|(s, row)| {
            let timing = acc.timing.services.get(&s);
            let mut spikes_ms = spikes.remove(&s).unwrap_or_default();
            spikes_ms.sort_unstable();
            spikes_ms.dedup();
            ServicePicture {
                service: names.name(s).to_owned(),
                handling: handling(acc, s, &resetters),
                layer: layer[&s],
                row,
                durations: durations.get(&s).map(Histogram::sorted).unwrap_or_default(),
                spikes_ms,
                for_nobody_ms: timing.map_or(0, |t| t.after_caller.total_ms),
                for_nobody_calls: timing.map_or(0, |t| t.after_caller.count),
            }
        })
        .collect();
    let edges = edges
        .iter()
        .map(|k| {
            let e = &acc.rollout.edges[k];
            GraphEdge {
                caller: names.name(k.0).to_owned(),
                callee: names.name(k.1).to_owned(),
                calls: e.calls,
                told_p50_ms: e.told.quantile(0.5),
            }
        })
        .collect();
    Pictures { services, edges }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_sits_one_column_right_of_its_deepest_caller() {
        let (a, b, c) = (Sym(1), Sym(2), Sym(3));
        // a -> b -> c and a -> c: c sits after b, not beside it.
        let l = layers(&[a, b, c], &[(a, b), (b, c), (a, c)]);
        assert_eq!((l[&a], l[&b], l[&c]), (0, 1, 2));
        // A cycle stops at the number of services rather than looping.
        let l = layers(&[a, b, c], &[(a, b), (b, c), (c, a)]);
        assert!(l.values().all(|v| *v <= 3), "{l:?}");
    }
}
