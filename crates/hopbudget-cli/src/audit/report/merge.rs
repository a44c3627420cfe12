//! `hopbudget audit --merge A.json B.json …`: one report from the `--json` outputs of several
//! audits, for N instances that shared the spans (`--kafka` consumers in one group, one
//! `--listen` per shard, one file per host), each trace audited by one of them.
//!
//! The merge is exact: besides the report, `--json` writes `merge_state`, the counters the
//! report was built from (per-hop and per-service counts, and the histograms behind every
//! median, maximum and spike, in fixed buckets), with the names they refer to. `--merge` adds
//! the counters (names matched by text, counts and histogram buckets added, depths too, for
//! their medians; least offsets and greatest gains kept) and builds the report again, with the same code and this command's
//! finding thresholds; so the merged medians, shares and findings are what one audit of all
//! the spans gives. What can differ is only which trace a finding names as its example (the
//! first input's, when several had one) and, for a trace whose spans were split between
//! instances, that each saw part of it (the Collector's Kafka exporter with
//! `partition_traces_by_id: true` keeps a trace on one partition, so on one instance).
//!
//! Inputs must come from the same hopbudget version (`hopbudget_version` and the state's
//! `format`) and the same analysis settings (`--tolerance-ms`, `--late-tolerance-ms`), which
//! change the counters themselves; anything else is refused with a message naming the file.

use foldhash::HashMap;
use std::hash::Hash;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::Report;
use super::state::{ProblemsState, State};
use crate::audit::analysis::analyze::{Accumulated, DepthAcc, EdgeAcc, HopAcc, OffsetAcc};
use crate::audit::analysis::group::GroupStats;
use crate::audit::analysis::header_reset::{HeaderEdge, HeaderResetAcc};
use crate::audit::analysis::rollout::{CallEdge, RolloutAcc, ServiceRollout};
use crate::audit::analysis::timing::{Excess, ServiceTiming, SpanTiming, TimingAcc};
use crate::audit::analysis::told::{ToldAcc, ToldEdge, Unmatched};
use crate::audit::input::InputStats;
use crate::audit::options::AuditOptions;
use crate::audit::problem::{ProblemKind, Problems};
use crate::audit::span::{Interner, Sym};
use crate::audit::status::StdOutcome;

pub use super::state::{MergeState, STATE_FORMAT, VERSION};

/// The head of a report, read first to tell what the file is.
#[derive(Deserialize)]
struct Head {
    hopbudget_version: Option<String>,
    merge_state: Option<serde_json::Value>,
}

/// Read one input: its state, or why it is not a report this version can merge.
fn read(path: &Path) -> Result<State, String> {
    let name = path.display();
    let text = std::fs::read(path).map_err(|e| format!("cannot read {name}: {e}"))?;
    let head: Head = serde_json::from_slice(&text).map_err(|e| {
        format!("{name} is not the --json output of `hopbudget audit` (not a JSON object: {e})")
    })?;
    let (Some(version), Some(state)) = (head.hopbudget_version, head.merge_state) else {
        return Err(format!(
            "{name} is not the --json output of `hopbudget audit` {VERSION} (no \
             hopbudget_version and merge_state): write each input with `hopbudget audit --json`"
        ));
    };
    let format = state.get("format").and_then(serde_json::Value::as_u64);
    if version != VERSION || format != Some(u64::from(STATE_FORMAT)) {
        return Err(format!(
            "{name} was written by hopbudget {version} (merge state format {}), this is \
             {VERSION} (format {STATE_FORMAT}): merge reports of one version, or audit the \
             spans again",
            format.map_or("none".to_owned(), |f| f.to_string())
        ));
    }
    serde_json::from_value(state)
        .map_err(|e| format!("{name}: its merge_state cannot be read ({e}); was it edited?"))
}

/// Merge the `--json` reports in `files` into one report, built with `opts`' finding
/// thresholds.
///
/// # Errors
/// A file cannot be read, is not an audit report of this version, or was audited with other
/// analysis settings than the first.
pub fn merge(files: &[PathBuf], opts: &AuditOptions) -> Result<Report, String> {
    let mut names = Interner::new(crate::audit::span::NAMES_CAP);
    let mut acc: Option<Accumulated> = None;
    let mut input = InputStats::default();
    let mut grouping = GroupStats::default();
    let mut problems = Problems::new(opts.max_problems);
    let mut first: Option<&Path> = None;
    for path in files {
        let state = read(path)?;
        // Each input's symbols, as this merge's.
        let remap = Remap(
            state
                .names
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    if i == Interner::OVERFLOW.0 as usize {
                        Interner::OVERFLOW
                    } else {
                        names.intern(n)
                    }
                })
                .collect(),
        );
        names.overflowed += state.names_overflowed;
        match &mut acc {
            None => {
                let mut fresh = Accumulated::new(state.acc.settings);
                fresh.merge(state.acc, &remap);
                acc = Some(fresh);
                first = Some(path);
            }
            Some(a) => {
                if a.settings != state.acc.settings {
                    return Err(format!(
                        "{} was audited with other settings ({:?}) than {} ({:?}): \
                         --tolerance-ms and --late-tolerance-ms change what is counted, so \
                         audit every instance with the same ones",
                        path.display(),
                        state.acc.settings,
                        first.map_or_else(String::new, |f| f.display().to_string()),
                        a.settings
                    ));
                }
                a.merge(state.acc, &remap);
            }
        }
        merge_input(&mut input, state.input);
        merge_grouping(&mut grouping, state.grouping);
        merge_problems(&mut problems, state.problems);
    }
    let Some(acc) = acc else {
        return Err("--merge needs at least one report".into());
    };
    Ok(super::findings::build(super::findings::Inputs {
        acc: &acc,
        names: &names,
        input,
        grouping,
        problems,
        rules: super::rules::FindingRules::of(opts),
    }))
}

fn merge_input(a: &mut InputStats, b: InputStats) {
    a.files += b.files;
    a.lines += b.lines;
    a.bad_lines += b.bad_lines;
    a.requests += b.requests;
    a.spans += b.spans;
    a.bad_spans += b.bad_spans;
    a.base64_ids += b.base64_ids;
}

fn merge_grouping(a: &mut GroupStats, b: GroupStats) {
    a.traces += b.traces;
    a.evicted += b.evicted;
    a.rootless += b.rootless;
    a.late_spans += b.late_spans;
    // Each instance held its own open spans: the most one of them held.
    a.peak_open_spans = a.peak_open_spans.max(b.peak_open_spans);
}

fn merge_problems(a: &mut Problems, b: ProblemsState) {
    a.total += b.total;
    let room = a.cap.saturating_sub(a.shown.len());
    a.shown.extend(b.shown.into_iter().take(room));
    for k in b.kinds {
        let kind = if a.kinds.len() < a.cap || a.kinds.iter().any(|m| m.kind == k.kind) {
            k.kind
        } else {
            "other".to_owned()
        };
        match a.kinds.iter_mut().find(|m| m.kind == kind) {
            Some(m) => {
                m.count += k.count;
                let room = 3usize.saturating_sub(m.examples.len());
                m.examples.extend(k.examples.into_iter().take(room));
            }
            None => a.kinds.push(ProblemKind {
                kind,
                count: k.count,
                examples: k.examples,
            }),
        }
    }
}

/// One input's symbols as the merged report's.
struct Remap(Vec<Sym>);

impl Remap {
    fn sym(&self, s: Sym) -> Sym {
        self.0
            .get(s.0 as usize)
            .copied()
            .unwrap_or(Interner::OVERFLOW)
    }
}

/// A map key that names things by symbol.
trait Key: Eq + Hash {
    fn remap(self, r: &Remap) -> Self;
}

impl Key for Sym {
    fn remap(self, r: &Remap) -> Self {
        r.sym(self)
    }
}

impl<A: Key, B: Key> Key for (A, B) {
    fn remap(self, r: &Remap) -> Self {
        (self.0.remap(r), self.1.remap(r))
    }
}

impl Key for (Sym, Sym, u8) {
    fn remap(self, r: &Remap) -> Self {
        (r.sym(self.0), r.sym(self.1), self.2)
    }
}

impl Key for StdOutcome {
    fn remap(self, _: &Remap) -> Self {
        self
    }
}

/// Adding one audit's counters to another's.
trait Merge {
    fn merge(&mut self, other: Self, r: &Remap);
}

impl Merge for u64 {
    fn merge(&mut self, other: Self, _: &Remap) {
        *self += other;
    }
}

fn map<K: Key, V: Merge + Default>(a: &mut HashMap<K, V>, b: HashMap<K, V>, r: &Remap) {
    for (k, v) in b {
        a.entry(k.remap(r)).or_default().merge(v, r);
    }
}

fn least<T: Ord + Copy>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        _ => a.or(b),
    }
}

fn most<T: Ord + Copy>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        _ => a.or(b),
    }
}

impl Merge for HopAcc {
    fn merge(&mut self, o: Self, r: &Remap) {
        self.spans += o.spans;
        for (a, b) in self.outcomes.iter_mut().zip(o.outcomes) {
            *a += b;
        }
        self.remaining.merge(o.remaining);
        self.durations.merge(o.durations);
        self.spike_durations.merge(o.spike_durations);
        map(&mut self.sources, o.sources, r);
        self.missing_at_root += o.missing_at_root;
        self.missing_inner += o.missing_inner;
        self.late += o.late;
        self.overrun.merge(o.overrun);
        self.required_max = most(self.required_max, o.required_max);
        self.resets += o.resets;
        self.compared += o.compared;
        self.reset_gain_max = self.reset_gain_max.max(o.reset_gain_max);
        self.reset_gains.merge(o.reset_gains);
        map(&mut self.reset_from, o.reset_from, r);
        map(&mut self.reset_below, o.reset_below, r);
        self.reset_example = self.reset_example.or(o.reset_example);
        self.told_more += o.told_more;
        self.depths.merge(o.depths);
    }
}

impl Merge for EdgeAcc {
    fn merge(&mut self, o: Self, _: &Remap) {
        self.calls += o.calls;
        self.resets += o.resets;
    }
}

impl Merge for DepthAcc {
    fn merge(&mut self, o: Self, r: &Remap) {
        self.hops += o.hops;
        self.refused += o.refused;
        map(&mut self.refused_by_hop, o.refused_by_hop, r);
    }
}

impl Merge for OffsetAcc {
    fn merge(&mut self, o: Self, _: &Remap) {
        self.samples += o.samples;
        self.min = least(self.min, o.min);
        self.all.merge(o.all);
    }
}

impl Merge for Excess {
    fn merge(&mut self, o: Self, _: &Remap) {
        self.of += o.of;
        self.count += o.count;
        self.excess.merge(o.excess);
        self.total_ms += o.total_ms;
        self.example = self.example.or(o.example);
    }
}

impl Merge for ServiceTiming {
    fn merge(&mut self, o: Self, r: &Remap) {
        self.server_spans += o.server_spans;
        self.after_caller.merge(o.after_caller, r);
        self.after_root.merge(o.after_root, r);
        map(&mut self.late_for, o.late_for, r);
        map(&mut self.server_outcomes, o.server_outcomes, r);
        map(&mut self.client_outcomes, o.client_outcomes, r);
        self.client_gave_up += o.client_gave_up;
        self.depths.merge(o.depths);
    }
}

impl Merge for SpanTiming {
    fn merge(&mut self, o: Self, _: &Remap) {
        self.durations.merge(o.durations);
        self.own_timeout.merge(o.own_timeout);
        self.answered.merge(o.answered);
        self.at_budget += o.at_budget;
    }
}

impl Merge for TimingAcc {
    fn merge(&mut self, o: Self, r: &Remap) {
        map(&mut self.services, o.services, r);
        map(&mut self.edges, o.edges, r);
        map(&mut self.spans, o.spans, r);
        self.depth.merge(o.depth);
        self.timed += o.timed;
    }
}

impl Merge for ServiceRollout {
    fn merge(&mut self, o: Self, _: &Remap) {
        self.inbound += o.inbound;
        self.inbound_with_deadline += o.inbound_with_deadline;
        self.calls_out += o.calls_out;
        self.calls_out_with_deadline += o.calls_out_with_deadline;
        self.refused += o.refused;
        self.late += o.late;
    }
}

impl Merge for RolloutAcc {
    fn merge(&mut self, o: Self, r: &Remap) {
        map(&mut self.services, o.services, r);
        map(&mut self.edges, o.edges, r);
    }
}

impl Merge for CallEdge {
    fn merge(&mut self, o: Self, _: &Remap) {
        self.calls += o.calls;
        self.with_deadline += o.with_deadline;
        self.told.merge(o.told);
    }
}

impl Merge for HeaderEdge {
    fn merge(&mut self, o: Self, _: &Remap) {
        self.calls += o.calls;
        self.resets += o.resets;
        self.added.merge(o.added);
        self.received.merge(o.received);
        self.sent.merge(o.sent);
        self.dropped += o.dropped;
        self.capped += o.capped;
        self.capped_added.merge(o.capped_added);
        self.reset_example = self.reset_example.or(o.reset_example);
        self.drop_example = self.drop_example.or(o.drop_example);
    }
}

impl Merge for HeaderResetAcc {
    fn merge(&mut self, o: Self, r: &Remap) {
        map(&mut self.edges, o.edges, r);
    }
}

impl Merge for ToldEdge {
    fn merge(&mut self, o: Self, _: &Remap) {
        self.compared += o.compared;
        self.more += o.more;
        self.added.merge(o.added);
        self.told.merge(o.told);
        self.left.merge(o.left);
        self.example = self.example.or(o.example);
    }
}

impl Merge for Unmatched {
    fn merge(&mut self, o: Self, _: &Remap) {
        self.calls += o.calls;
        self.told.merge(o.told);
        self.example = self.example.or(o.example);
    }
}

impl Merge for ToldAcc {
    fn merge(&mut self, o: Self, r: &Remap) {
        map(&mut self.edges, o.edges, r);
        map(&mut self.egress_calls, o.egress_calls, r);
        map(&mut self.unmatched, o.unmatched, r);
    }
}

impl Merge for Accumulated {
    fn merge(&mut self, o: Self, r: &Remap) {
        map(&mut self.hops, o.hops, r);
        self.hops_overflowed += o.hops_overflowed;
        map(&mut self.edges, o.edges, r);
        map(&mut self.roots, o.roots, r);
        if self.depths.len() < o.depths.len() {
            self.depths.resize_with(o.depths.len(), DepthAcc::default);
        }
        for (a, b) in self.depths.iter_mut().zip(o.depths) {
            a.merge(b, r);
        }
        self.entry_budget.merge(o.entry_budget);
        self.shortfall.merge(o.shortfall);
        map(&mut self.offsets, o.offsets, r);
        self.traces_complete += o.traces_complete;
        self.traces_partial += o.traces_partial;
        self.hop_spans += o.hop_spans;
        self.header_spans += o.header_spans;
        self.detached_edges += o.detached_edges;
        self.timing.merge(o.timing, r);
        self.header_resets.merge(o.header_resets, r);
        self.rollout.merge(o.rollout, r);
        self.sidecar_spans += o.sidecar_spans;
        self.told.merge(o.told, r);
    }
}
