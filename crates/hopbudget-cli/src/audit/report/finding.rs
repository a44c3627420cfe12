//! One finding: what kind it is and how much it matters. At the bottom of the report, since
//! every family's report half makes findings and the report's shape lists them.

use serde::Serialize;

/// How much a finding matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// A chain break: the exit status is 1.
    Error,
    /// Worth fixing.
    Warning,
    /// For information.
    Info,
}

/// What kind of finding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// A hop started with more budget than its caller had left when it called (S13).
    ChainBreak,
    /// Hops arrived without a deadline (`deadline.source = fallback`, C8).
    MissingDeadline,
    /// A cluster of hop durations at one value: a fixed timeout firing.
    TimeoutSpike,
    /// Work finished after its deadline (`deadline.overrun_ms`).
    LateWork,
    /// Most hops at the deepest level were refused (S6).
    EntryBudgetTooSmall,
    /// Estimated clock offset between two services with an epoch carrier (S3).
    ClockOffset,
    /// A server span ended after the client span that called it: the caller had given up
    /// and the work went on for nobody (from span timing alone).
    WorkAfterCallerLeft,
    /// A server span ended after the trace's root span: the request was over.
    WorkAfterRootEnded,
    /// How many services deep requests went.
    ChainDepth,
    /// A service's spans ended expired or cancelled by OpenTelemetry's standard status
    /// attributes (no hopbudget needed).
    ExpiredOrCancelled,
    /// A service sent a deadline header with more budget than it had left of the one it
    /// received (from captured `http.request.header.*`, no hopbudget needed): a reset.
    BudgetResetByHeader,
    /// A service received a deadline header and sent none on a call.
    DeadlineDroppedByHeader,
    /// A hop behind a sidecar was told more budget than its caller had left when it called
    /// (C26): always an error.
    ToldMoreThanCallerHad,
    /// A sidecar's egress call matched no inbound request (`deadline.matched = false`): the
    /// service does not carry trace context (C26). Always an error.
    UnmatchedCall,
    /// A service sent a deadline header with more than it had left, and its sidecar's egress
    /// told the next hop no more than the caller had: capped, not a reset.
    ResetCapped,
}

/// One finding.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    /// What kind.
    pub kind: FindingKind,
    /// How much it matters.
    pub severity: Severity,
    /// The hop it is about (`service route`), or the services for a clock offset.
    pub hop: String,
    /// How many spans show it.
    pub count: u64,
    /// Out of how many.
    pub of: u64,
    /// The value in milliseconds it is about (reset size, spike value, offset, ...).
    pub value_ms: Option<i64>,
    /// The callers involved (chain break) or the hops at that depth (S6).
    pub related: Vec<String>,
    /// The hops below a reset, which ran on the reset budget.
    pub below: Vec<String>,
    /// One line for people.
    pub detail: String,
    /// A trace that shows it (hex trace id).
    pub example_trace: Option<String>,
}
