//! Turning one run's records into the figures the report shows and the JSON holds, and the
//! figures themselves: everything the demo measured ([`DemoResults`]), one mode's
//! ([`ModeResult`]) and one point of the load sweep ([`SweepPoint`]).
//!
//! One file on purpose, over 500 lines: the figures and the code that computes them change
//! together.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::mode::Mode;
use super::run_data::RunData;
use super::topology::Topology;

/// Everything the demo measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DemoResults {
    /// The client budget, ms.
    pub budget_ms: u64,
    /// The client timeout, ms.
    pub client_timeout_ms: u64,
    /// Capacity of the graph (its bottleneck's), requests per second.
    pub capacity_per_s: f64,
    /// The bottleneck service.
    pub bottleneck: String,
    /// One result per mode.
    pub modes: Vec<ModeResult>,
    /// The load sweep, if run.
    pub sweep: Vec<SweepPoint>,
    /// The topology that ran.
    pub topology: Topology,
}

impl DemoResults {
    /// The result of one mode.
    pub fn mode(&self, mode: Mode) -> Option<&ModeResult> {
        self.modes.iter().find(|m| m.mode == mode)
    }
}

/// One point of the load sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    /// Offered load as a multiple of the graph's capacity.
    pub load_factor: f64,
    /// Offered load, requests per second.
    pub rate_per_s: f64,
    /// Goodput per mode, in the order of `DemoResults::modes`.
    pub goodput_per_s: Vec<(Mode, f64)>,
    /// Goodput of complete (not degraded) answers per mode.
    pub full_goodput_per_s: Vec<(Mode, f64)>,
    /// p99 client latency per mode, ms.
    pub p99_ms: Vec<(Mode, f64)>,
    /// p99 client latency of admitted requests (all but those answered with a refusal) per
    /// mode, ms.
    #[serde(default)]
    pub admitted_p99_ms: Vec<(Mode, f64)>,
    /// Refusals per second summed over every hop, per mode.
    #[serde(default)]
    pub refused_per_s: Vec<(Mode, f64)>,
    /// Calls that ended expired (work started, then cut at the deadline or a per-hop timeout)
    /// per second, summed over every hop, per mode: the work a graph wasted rather than shed.
    #[serde(default)]
    pub expired_per_s: Vec<(Mode, f64)>,
}

impl SweepPoint {
    /// The figure `of` picks for `mode`, if it ran.
    pub fn get(&self, of: impl Fn(&Self) -> &Vec<(Mode, f64)>, mode: Mode) -> Option<f64> {
        of(self).iter().find(|(m, _)| *m == mode).map(|(_, v)| *v)
    }
}

/// Latency percentiles, ms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 99th.
    pub p99: f64,
    /// 99.9th.
    pub p999: f64,
    /// Largest.
    pub max: f64,
}

/// One service's figures for one mode.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HopResult {
    /// Service name.
    pub service: String,
    /// Requests that reached it.
    pub arrivals: u64,
    /// Median budget left at arrival, ms (what the hop read in propagated mode; what the
    /// client's budget implied, unknown to the hop, without propagation).
    pub budget_at_arrival_p50_ms: Option<i64>,
    /// 1st percentile of the same (the short end).
    pub budget_at_arrival_p1_ms: Option<i64>,
    /// Completed.
    pub completed: u64,
    /// Refused before work (C3).
    pub refused: u64,
    /// Expired, or (timeouts) the caller's own timeout fired.
    pub expired: u64,
    /// Cancelled: the caller went away.
    pub cancelled: u64,
    /// Other failures.
    pub failed: u64,
    /// Own work, ms.
    pub work_ms: f64,
    /// Own work after the client stopped waiting, ms.
    pub work_after_give_up_ms: f64,
}

/// Scenario S6: most calls to a leaf were refused because the budget that reached it was
/// below what it needs. Nothing is wrong with the leaf: the entry budget is too small for the
/// depth of the chain above it, and the deadline is reporting that correctly.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OverShrunk {
    /// The leaf.
    pub leaf: String,
    /// Hops from the edge to the leaf.
    pub depth: u32,
    /// Share of the calls to it refused before work, %.
    pub refused_pct: f64,
    /// Median budget left when calls reached it, ms.
    pub budget_at_arrival_ms: i64,
    /// What it needs to start (its minimum budget), ms.
    pub needs_ms: u64,
    /// The entry budget that would leave it what it needs, given what the chain above it
    /// spends (median), ms.
    pub entry_budget_needed_ms: i64,
}

/// Above this share of refusals at a leaf, the run reports an over-shrunk budget (S6).
const OVER_SHRUNK_SHARE: f64 = 0.5;

/// Leaves whose calls were mostly refused (S6), from one mode's per-hop figures.
fn over_shrunk(topo: &Topology, hops: &[HopResult], entry_budget_ms: u64) -> Vec<OverShrunk> {
    let edge_budget = hops
        .iter()
        .find(|h| h.service == topo.edge().name)
        .and_then(|h| h.budget_at_arrival_p50_ms)
        .unwrap_or(entry_budget_ms as i64);
    hops.iter()
        .filter_map(|h| {
            let spec = topo.service(&h.service)?;
            let ended = h.completed + h.refused + h.expired + h.cancelled + h.failed;
            if !spec.calls.is_empty() || ended == 0 {
                return None;
            }
            let share = h.refused as f64 / ended as f64;
            if share <= OVER_SHRUNK_SHARE {
                return None;
            }
            // Refused calls may never have been seen by the leaf itself (its caller refused
            // locally, C3): then its caller's budget at arrival is the best figure there is.
            let at_leaf = h.budget_at_arrival_p50_ms.or_else(|| {
                let caller = topo.caller_of(&h.service)?;
                hops.iter()
                    .find(|c| c.service == caller.name)?
                    .budget_at_arrival_p50_ms
            })?;
            let spent_above =
                (edge_budget - at_leaf).max(0) + (entry_budget_ms as i64 - edge_budget).max(0);
            Some(OverShrunk {
                leaf: h.service.clone(),
                depth: depth(topo, &h.service),
                refused_pct: 100.0 * share,
                budget_at_arrival_ms: at_leaf,
                needs_ms: spec.min_budget_ms,
                entry_budget_needed_ms: spent_above + spec.min_budget_ms as i64,
            })
        })
        .collect()
}

/// Hops from the edge to `service`.
fn depth(topo: &Topology, service: &str) -> u32 {
    let mut depth = 0;
    let mut name = service.to_owned();
    while let Some(caller) = topo.caller_of(&name) {
        depth += 1;
        name = caller.name.clone();
        if depth as usize > topo.services.len() {
            break; // a cycle; the topology check rejects these, so this is only a guard
        }
    }
    depth
}

/// Background work figures (S11).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BackgroundResult {
    /// Handed to the queue.
    pub scheduled: u64,
    /// Done within its own deadline.
    pub sent: u64,
    /// Of those, finished after the client had its answer.
    pub sent_after_answer: u64,
    /// Dropped before work: the deadline passed in the queue (S10).
    pub dropped_expired: u64,
    /// Expired while running.
    pub expired: u64,
}

/// One mode's figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModeResult {
    /// Mode.
    pub mode: Mode,
    /// The service ignoring inbound deadlines, if any.
    pub forgetful: Option<String>,
    /// Offered load, requests per second.
    pub rate_per_s: f64,
    /// Seconds of arrivals.
    pub duration_s: f64,
    /// Requests sent.
    pub requests: u64,
    /// Successful answers (any latency).
    pub ok: u64,
    /// Successful answers that were degraded (an optional call failed).
    pub degraded: u64,
    /// Requests the client gave up on (its timeout fired).
    pub gave_up: u64,
    /// Client latency: until the answer, or until the client gave up.
    pub client_latency_ms: Percentiles,
    /// Client latency of the admitted requests: every request but those answered with a
    /// refusal (C3, C21), whatever else their answer (S17's figure).
    #[serde(default)]
    pub admitted_latency_ms: Percentiles,
    /// Requests answered with a refusal.
    #[serde(default)]
    pub refused: u64,
    /// Refusals per second summed over every hop (an optional call refused below the edge
    /// degrades the answer instead of refusing it).
    #[serde(default)]
    pub hop_refusals_per_s: f64,
    /// Share of requests whose client latency exceeded the budget, %.
    pub over_budget_pct: f64,
    /// Successful answers within the budget, per second (degraded ones included).
    pub goodput_per_s: f64,
    /// Successful, complete (not degraded) answers within the budget, per second.
    pub full_goodput_per_s: f64,
    /// All services' own work, ms.
    pub work_ms: f64,
    /// Own work done after the client stopped waiting, summed over services, ms.
    pub work_after_give_up_ms: f64,
    /// Edge hop duration (arrival to its answer, even one nobody waited for).
    pub edge_latency_ms: Percentiles,
    /// Work intervals still open when the run was stopped (detached work at overload).
    pub work_cut_off: u64,
    /// Per service, in call order.
    pub hops: Vec<HopResult>,
    /// Leaves whose calls were mostly refused: the entry budget is too small for the chain
    /// depth (S6). Empty when none was.
    #[serde(default)]
    pub over_shrunk: Vec<OverShrunk>,
    /// Background work handed over the queue (S11).
    pub background: BackgroundResult,
    /// Client latencies, ms, sorted (for the distribution chart; not in the JSON).
    #[serde(skip)]
    pub latencies_ms: Vec<f64>,
    /// Hop durations of the forgetful service (S13), ms, sorted (for the histogram; not in
    /// the JSON). Empty without `--forgetful`.
    #[serde(skip)]
    pub forgetful_hop_ms: Vec<f64>,
    /// One request followed through every hop (the same request in every mode), for the
    /// report's timeline.
    #[serde(default)]
    pub timeline: Option<Timeline>,
    /// Seconds the run took.
    pub wall_s: f64,
}

fn histogram() -> Histogram<u64> {
    // Microseconds up to 10 minutes, 3 significant digits; construction cannot fail with
    // these bounds, but fall back to an auto-resizing one rather than panic.
    Histogram::new_with_bounds(1, 600_000_000, 3)
        .or_else(|_| Histogram::new(3))
        .unwrap_or_else(|_| unreachable_histogram())
}

#[cold]
fn unreachable_histogram() -> Histogram<u64> {
    unreachable!("a 3-digit histogram is always valid")
}

fn percentiles(h: &Histogram<u64>) -> Percentiles {
    if h.is_empty() {
        return Percentiles::default();
    }
    let ms = |v: u64| v as f64 / 1000.0;
    Percentiles {
        p50: ms(h.value_at_quantile(0.5)),
        p99: ms(h.value_at_quantile(0.99)),
        p999: ms(h.value_at_quantile(0.999)),
        max: ms(h.max()),
    }
}

fn quantile(sorted: &[i64], q: f64) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted.get(i).copied()
}

/// Summarise one run.
pub fn summarise(
    topo: &Topology,
    mode: Mode,
    forgetful: Option<String>,
    rate: f64,
    duration: Duration,
    data: &RunData,
) -> ModeResult {
    let budget = Duration::from_millis(topo.client.budget_ms);
    let clients = data.collector.clients();
    let mut lat = histogram();
    let mut admitted = histogram();
    let mut latencies = Vec::with_capacity(clients.len());
    let (mut ok, mut degraded, mut gave_up, mut over, mut good, mut full) = (0u64, 0, 0, 0, 0, 0);
    let mut refused = 0u64;
    for c in clients.values() {
        let Some(end) = c.end else { continue };
        let d = end - c.start;
        let _ = lat.record(d.as_micros().max(1) as u64);
        if c.refused {
            refused += 1;
        } else {
            let _ = admitted.record(d.as_micros().max(1) as u64);
        }
        latencies.push(d.as_secs_f64() * 1000.0);
        ok += u64::from(c.ok);
        degraded += u64::from(c.ok && c.degraded);
        gave_up += u64::from(c.gave_up);
        if d > budget {
            over += 1;
        } else if c.ok {
            good += 1;
            full += u64::from(!c.degraded);
        }
    }
    latencies.sort_by(f64::total_cmp);
    let n = clients.len().max(1) as f64;

    let counts = data.collector.hops();
    let mut work = vec![0.0f64; topo.services.len()];
    let mut after = vec![0.0f64; topo.services.len()];
    for w in data.collector.work_records() {
        let ms = (w.end - w.start).as_secs_f64() * 1000.0;
        work[w.service] += ms;
        let client_end = clients.get(&w.id).and_then(|c| c.end);
        let wasted = match client_end {
            Some(end) if w.end > end => (w.end - w.start.max(end)).as_secs_f64() * 1000.0,
            Some(_) => 0.0,
            // The client never finished (cannot happen once the run is complete): all waste.
            None => ms,
        };
        after[w.service] += wasted;
    }
    let edge_idx = topo.index_of(&topo.edge().name).unwrap_or(0);
    let mut edge = histogram();
    for s in data.collector.spans() {
        if s.service == edge_idx {
            let _ = edge.record((s.end - s.start).as_micros().max(1) as u64);
        }
    }
    let hops: Vec<HopResult> = topo
        .in_call_order()
        .into_iter()
        .filter_map(|s| {
            let i = topo.index_of(&s.name)?;
            let c = &counts[i];
            let mut b = c.budget_at_arrival_ms.clone();
            b.sort_unstable();
            Some(HopResult {
                service: s.name.clone(),
                arrivals: c.arrivals,
                budget_at_arrival_p50_ms: quantile(&b, 0.5),
                budget_at_arrival_p1_ms: quantile(&b, 0.01),
                completed: c.completed,
                refused: c.refused,
                expired: c.expired,
                cancelled: c.cancelled,
                failed: c.failed,
                work_ms: work[i],
                work_after_give_up_ms: after[i],
            })
        })
        .collect();
    let forgetful_idx = forgetful.as_deref().and_then(|f| topo.index_of(f));
    ModeResult {
        mode,
        forgetful,
        rate_per_s: rate,
        duration_s: duration.as_secs_f64(),
        requests: clients.len() as u64,
        ok,
        degraded,
        gave_up,
        client_latency_ms: percentiles(&lat),
        admitted_latency_ms: percentiles(&admitted),
        refused,
        hop_refusals_per_s: hops.iter().map(|h| h.refused as f64).sum::<f64>()
            / duration.as_secs_f64().max(0.001),
        over_budget_pct: 100.0 * over as f64 / n,
        goodput_per_s: good as f64 / duration.as_secs_f64().max(0.001),
        full_goodput_per_s: full as f64 / duration.as_secs_f64().max(0.001),
        work_ms: work.iter().sum(),
        work_after_give_up_ms: after.iter().sum(),
        edge_latency_ms: percentiles(&edge),
        work_cut_off: data.cut_off as u64,
        over_shrunk: over_shrunk(topo, &hops, topo.client.budget_ms),
        hops,
        background: {
            let b = data.collector.background();
            BackgroundResult {
                scheduled: b.scheduled,
                sent: b.sent,
                sent_after_answer: b.sent_after_answer,
                dropped_expired: b.dropped_expired,
                expired: b.expired,
            }
        },
        latencies_ms: latencies,
        forgetful_hop_ms: {
            let idx = forgetful_idx;
            let mut d: Vec<f64> = data
                .collector
                .spans()
                .iter()
                .filter(|s| Some(s.service) == idx)
                .map(|s| (s.end - s.start).as_secs_f64() * 1000.0)
                .collect();
            d.sort_by(f64::total_cmp);
            d
        },
        timeline: None,
        wall_s: data.wall_s,
    }
}

/// One request as it went through the graph in one mode, times in ms from the moment the
/// client sent it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// The request id (the same in every mode: the same seeded request).
    pub request_id: u64,
    /// When the client stopped waiting.
    pub client_end_ms: f64,
    /// Whether it stopped because it gave up (its timeout fired).
    pub gave_up: bool,
    /// Whether it got a successful answer.
    pub ok: bool,
    /// Every hop the request reached, in the order they started.
    pub hops: Vec<TimelineHop>,
}

/// One hop of a [`Timeline`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimelineHop {
    /// The service.
    pub service: String,
    /// Arrival.
    pub start_ms: f64,
    /// Terminal status.
    pub end_ms: f64,
    /// How it ended.
    pub outcome: hopbudget::Outcome,
    /// The budget it read on arrival, if it had one.
    pub remaining_ms: Option<u64>,
    /// Intervals of its own work.
    pub work_ms: Vec<(f64, f64)>,
}

/// The request to draw: the one whose work went on longest after its client stopped waiting
/// in `data` (a run of the first mode), so the picture shows the difference that matters.
pub fn pick_request(data: &RunData) -> Option<u64> {
    let clients = data.collector.clients();
    let mut late: std::collections::HashMap<u64, f64> = std::collections::HashMap::new();
    for w in data.collector.work_records() {
        if let Some(end) = clients.get(&w.id).and_then(|c| c.end)
            && w.end > end
        {
            *late.entry(w.id).or_default() += (w.end - w.start.max(end)).as_secs_f64();
        }
    }
    late.into_iter()
        .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|(id, _)| id)
        .or_else(|| clients.keys().min().copied())
}

/// Request `id` as it went through the graph in the run `data`.
pub fn timeline(topo: &Topology, data: &RunData, id: u64) -> Option<Timeline> {
    let client = data.collector.clients().get(&id).copied()?;
    let ms = |t: tokio::time::Instant| {
        if t >= client.start {
            (t - client.start).as_secs_f64() * 1000.0
        } else {
            -((client.start - t).as_secs_f64() * 1000.0)
        }
    };
    let work = data.collector.work_records();
    let mut hops: Vec<TimelineHop> = data
        .collector
        .spans()
        .into_iter()
        .filter(|s| s.id == id)
        .map(|s| TimelineHop {
            service: topo.services[s.service].name.clone(),
            start_ms: ms(s.start),
            end_ms: ms(s.end),
            outcome: s.outcome,
            remaining_ms: s.remaining_ms,
            work_ms: work
                .iter()
                .filter(|w| w.id == id && w.service == s.service)
                .map(|w| (ms(w.start), ms(w.end)))
                .collect(),
        })
        .collect();
    hops.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
    Some(Timeline {
        request_id: id,
        client_end_ms: client.end.map_or(f64::NAN, ms),
        gave_up: client.gave_up,
        ok: client.ok,
        hops,
    })
}
