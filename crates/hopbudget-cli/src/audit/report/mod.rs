//! Turning the accumulated counters into findings, per hop, and the report's tables.
//!
//! The findings follow the list: budget resets (S13), missing deadlines (C8), a
//! latency spike at one exact value (a default timeout firing), late work (C14), refusals
//! concentrated at the deepest hops ("entry budget too small for this chain depth", S6), and
//! for hops that carry the deadline as an epoch instant, an estimate of the clock offset
//! between the two services (S3).
//!
//! This file is the report's shape, what `--json` prints; `findings.rs` builds it, one file
//! per finding family beside it (`timing.rs`, `header_reset.rs`, `told.rs`, `rollout.rs`,
//! each the report half of the analysis file of the same name in
//! [`crate::audit::analysis`]), with their severity (`reset_severity.rs`) and thresholds
//! (`rules.rs`). The report is shown here too: the table and JSON ([`render`]) and the HTML
//! page ([`page`]). [`merge`] (`--merge`) is here because it reads reports, not spans: it
//! adds the counters of several reports' `merge_state` ([`state`]) and builds the report again.

mod finding;
pub(crate) mod findings;
pub(crate) mod header_reset;
pub mod merge;
pub mod page;
pub mod pictures;
pub mod render;
pub(crate) mod reset_severity;
pub(crate) mod rollout;
pub(crate) mod rules;
pub mod state;
pub(crate) mod timing;
pub(crate) mod told;

pub use finding::{Finding, FindingKind, Severity};
pub use rollout::{Forwards, RolloutRow};
pub use timing::{ChainDepth, ServiceRow, TimingEdge};

use serde::Serialize;

use super::analysis::group::GroupStats;
use super::input::InputStats;
use super::problem::{Problem, ProblemKind};

/// One row of the per-hop table.
#[derive(Clone, Debug, Serialize)]
pub struct HopRow {
    /// `service route`.
    pub hop: String,
    /// Service name.
    pub service: String,
    /// Span name (route).
    pub route: String,
    /// Typical depth: the median of the depths it was seen at (0 = entry hop).
    pub depth: Option<u32>,
    /// Hop spans.
    pub spans: u64,
    /// Completed.
    pub completed: u64,
    /// Refused before work (C3).
    pub refused: u64,
    /// Expired (C4).
    pub expired: u64,
    /// Cancelled (C5).
    pub cancelled: u64,
    /// Budget left on arrival, median (ms).
    pub remaining_p50_ms: Option<u64>,
    /// Duration, median (ms).
    pub duration_p50_ms: Option<u64>,
    /// Duration, 99th percentile (ms).
    pub duration_p99_ms: Option<u64>,
    /// Arrivals without a deadline.
    pub missing: u64,
    /// Work finished after its deadline.
    pub late: u64,
    /// Arrivals with more budget than the caller had left.
    pub resets: u64,
}

/// Hops and refusals at one depth.
#[derive(Clone, Debug, Serialize)]
pub struct DepthRow {
    /// 0 is the entry hop.
    pub depth: u32,
    /// Hop spans at this depth.
    pub hops: u64,
    /// Of which refused.
    pub refused: u64,
    /// `refused / hops`.
    pub refusal_rate: f64,
}

/// One edge of the hop tree, summed over traces.
#[derive(Clone, Debug, Serialize)]
pub struct TreeEdge {
    /// The calling hop.
    pub parent: String,
    /// The called hop.
    pub child: String,
    /// How many calls.
    pub calls: u64,
    /// Of which reset the budget.
    pub resets: u64,
}

/// Trace counts.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TraceStats {
    /// Traces with every hop linked to the entry hop.
    pub complete: u64,
    /// Traces with a missing parent span or no root (split across files, cut by the window).
    pub partial: u64,
    /// Hop spans (spans with `deadline.*` attributes).
    pub hop_spans: u64,
    /// Background hops with their own deadline (C12), not compared with their caller.
    pub detached: u64,
}

/// Everything `hopbudget audit` found.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// What was read.
    pub input: InputStats,
    /// How spans were grouped into traces.
    pub grouping: GroupStats,
    /// Traces and hops.
    pub traces: TraceStats,
    /// The findings, most serious first.
    pub findings: Vec<Finding>,
    /// Per hop.
    pub hops: Vec<HopRow>,
    /// Refusals by depth (S6).
    pub depths: Vec<DepthRow>,
    /// The entry hops and how many traces each started.
    pub roots: Vec<(String, u64)>,
    /// The hop tree.
    pub tree: Vec<TreeEdge>,
    /// What could not be read (the first ones; `problems_total` counts all).
    pub problems: Vec<Problem>,
    /// How many problems in all.
    pub problems_total: u64,
    /// Per service, from span timing alone (server spans against their callers and the
    /// root), and the standard outcomes of its server and client spans.
    pub services: Vec<ServiceRow>,
    /// Per caller-to-server edge, from span timing alone.
    pub timing_edges: Vec<TimingEdge>,
    /// How many services deep requests went.
    pub chain_depth: Option<ChainDepth>,
    /// The problems grouped by kind, each with a count and its first examples.
    pub problem_kinds: Vec<ProblemKind>,
    /// The rollout map: per service, the share of inbound requests that arrived with a
    /// deadline, whether it forwards one, its refusals and its late work.
    pub rollout: Vec<RolloutRow>,
    /// Set when nothing could be audited, saying why: no spans were read, or no span had
    /// anything to judge (no deadline attribute or header, no caller to time it against).
    /// The exit status is then 4.
    pub nothing_to_judge: Option<String>,
    /// The hopbudget version that made the report (`--merge` merges reports of one version).
    pub hopbudget_version: String,
    /// The counters the report was built from, so that the `--json` outputs of several
    /// instances merge exactly (`hopbudget audit --merge`); see [`crate::audit::report::merge`].
    pub merge_state: state::MergeState,
    /// What the HTML page draws: the call graph, durations, work for nobody. Not in `--json`.
    #[serde(skip)]
    pub pictures: pictures::Pictures,
}

impl Report {
    /// How many chain-break findings that are errors: resets seen in hop attributes or in
    /// captured deadline headers that added at least the error threshold in at least its share
    /// of calls (`--reset-error-ms`, `--reset-error-percent`; a smaller or rarer reset is a
    /// warning and does not count), any hop behind a sidecar told more than its caller had,
    /// any outbound call that matched no inbound request (C26), and work for nobody that is
    /// an error (`--nobody-error-ms`, `--nobody-error-percent`: the work a fleet that
    /// propagates nothing does for callers who left).
    pub fn chain_breaks(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| {
                f.severity == Severity::Error
                    && matches!(
                        f.kind,
                        FindingKind::ChainBreak
                            | FindingKind::BudgetResetByHeader
                            | FindingKind::ToldMoreThanCallerHad
                            | FindingKind::UnmatchedCall
                            | FindingKind::WorkAfterCallerLeft
                    )
            })
            .count()
    }

    /// The exit status `hopbudget audit` ends with: 1 when a chain break that is an error
    /// was found ([`Report::chain_breaks`]), else 4
    /// when nothing could be audited ([`Report::nothing_to_judge`]: no spans, or none with
    /// anything to judge), else 3 when some input could not be read, else 0. (2 is a usage
    /// error, before any reading.)
    pub fn exit_status(&self) -> u8 {
        if self.chain_breaks() > 0 {
            1
        } else if self.nothing_to_judge.is_some() {
            4
        } else if self.problems_total > 0 {
            3
        } else {
            0
        }
    }
}
