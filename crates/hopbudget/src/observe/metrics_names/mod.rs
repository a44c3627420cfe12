//! Metric names, the catalogue of every metric hopbudget records ([`METRICS`]), and their
//! descriptions. Every name, type and label is listed in the guide's observability page
//! (`docs/guide/observability.md`). Recording them is in `record`, with the handles a layer
//! holds in `held` and its routes' table in `layer_keys`.

use metrics::{Level, Metadata, Unit};

mod held;
mod layer_keys;
mod record;

pub(super) use layer_keys::LayerKeys;
pub(crate) use record::{
    KeyCache, Keys, record_arrival, record_end, record_late, record_malformed,
    record_queue_expired, record_unenforced,
};
pub(crate) use record::{cache_read_key, count, degraded_key};

/// What every hopbudget metric is registered with: recorded per call (`record`) or through a
/// held handle (`held`).
static METADATA: Metadata<'static> = Metadata::new(
    "hopbudget::observe",
    Level::INFO,
    Some("hopbudget::observe"),
);

/// Counter: hops by terminal status. Labels: `service`, `route`, `outcome`.
///
/// See the [example](METRICS#examples).
pub const HOPS_TOTAL: &str = "hopbudget_hops_total";
/// Counter: requests refused before any work. Labels: `service`, `route`.
///
/// See the [example](METRICS#examples).
pub const REFUSED_BEFORE_WORK_TOTAL: &str = "hopbudget_refused_before_work_total";
/// Counter: arrivals with no deadline, given the edge total. Labels: `service`, `route`. On
/// the route `(outbound)`, calls sent outside any request, with a third label, `callee`
/// ([`outbound_missing_to`](crate::observe::outbound_missing_to)).
///
/// See the [example](METRICS#examples).
pub const DEADLINE_MISSING_TOTAL: &str = "hopbudget_deadline_missing_total";
/// Counter: malformed deadline headers. Labels: `service`, `route`, `header`.
///
/// See the [example](METRICS#examples).
pub const MALFORMED_HEADERS_TOTAL: &str = "hopbudget_malformed_headers_total";
/// Histogram: remaining budget at arrival, ms. Labels: `service`, `route`.
///
/// See the [example](METRICS#examples).
pub const REMAINING_AT_ARRIVAL_MS: &str = "hopbudget_remaining_at_arrival_ms";
/// Counter: arrivals. Labels: `service`, `route`.
///
/// See the [example](METRICS#examples).
pub const ARRIVALS_TOTAL: &str = "hopbudget_arrivals_total";
/// Counter: arrivals with less than the profile's `low_budget_ms`. Labels: `service`, `route`.
///
/// See the [example](METRICS#examples).
pub const LOW_BUDGET_ARRIVALS_TOTAL: &str = "hopbudget_low_budget_arrivals_total";
/// Counter: work that finished after its deadline. Labels: `service`, `route`.
///
/// See the [example](METRICS#examples).
pub const LATE_WORK_TOTAL: &str = "hopbudget_late_work_total";
/// Histogram: how long after the deadline late work finished, ms. Labels: `service`, `route`.
///
/// See the [example](METRICS#examples).
pub const LATE_WORK_OVERRUN_MS: &str = "hopbudget_late_work_overrun_ms";
/// Counter: queue messages dropped as expired. Labels: `service`, `queue`.
///
/// See the [example](METRICS#examples).
pub const QUEUE_EXPIRED_TOTAL: &str = "hopbudget_queue_expired_total";
/// Counter: a cheaper path taken because the budget was below the full path's cost.
/// Labels: `service`, `route`, `path` (the cheaper path's name).
///
/// See the [example](METRICS#examples).
pub const DEGRADED_TOTAL: &str = "hopbudget_degraded_total";
/// Counter: read-through cache reads by the choice made (`fresh`, `recomputed`, `stale`,
/// `refused`). Labels: `service`, `cache`, `choice`.
///
/// See the [example](METRICS#examples).
pub const CACHE_READS_TOTAL: &str = "hopbudget_cache_reads_total";

/// Counter: hops let through while enforcement was off (the profile's `enforce: false`, rule
/// [C24](crate::contract#c24)), by what enforcement would have done (`refused`, `expired`,
/// `malformed`). Labels: `service`, `route`, `would`.
///
/// See the [example](METRICS#examples).
pub const UNENFORCED_TOTAL: &str = "hopbudget_unenforced_total";

/// Histogram: how long a hop took from arrival to its terminal status, ms. Labels: `service`,
/// `route`, `outcome`. Its buckets are narrow around common default timeouts, so that hops
/// ending at a default (a dropped deadline) stand out.
///
/// See the [example](METRICS#examples).
pub const HOP_DURATION_MS: &str = "hopbudget_hop_duration_ms";

/// Histogram: the share of its budget at arrival a hop used before its terminal status (1 is
/// all of it). Hops that arrived with no budget left are not recorded. Labels: `service`,
/// `route`.
///
/// See the [example](METRICS#examples).
pub const BUDGET_USED_RATIO: &str = "hopbudget_budget_used_ratio";

/// Every metric hopbudget records: name, Prometheus type, labels.
///
/// # Examples
///
/// ```
/// use hopbudget::observe::{
///     ARRIVALS_TOTAL, CACHE_READS_TOTAL, DEADLINE_MISSING_TOTAL, DEGRADED_TOTAL, HOPS_TOTAL,
///     LATE_WORK_OVERRUN_MS, LATE_WORK_TOTAL, LOW_BUDGET_ARRIVALS_TOTAL, MALFORMED_HEADERS_TOTAL,
///     METRICS, QUEUE_EXPIRED_TOTAL, REFUSED_BEFORE_WORK_TOTAL, REMAINING_AT_ARRIVAL_MS,
/// };
///
/// // One row per metric: the name to query, its type and its labels.
/// assert_eq!(METRICS[0], (HOPS_TOTAL, "counter", &["service", "route", "outcome"][..]));
/// let names: Vec<&str> = METRICS.iter().map(|(name, _, _)| *name).collect();
/// for name in [
///     HOPS_TOTAL, REFUSED_BEFORE_WORK_TOTAL, DEADLINE_MISSING_TOTAL, MALFORMED_HEADERS_TOTAL,
///     REMAINING_AT_ARRIVAL_MS, ARRIVALS_TOTAL, LOW_BUDGET_ARRIVALS_TOTAL, LATE_WORK_TOTAL,
///     LATE_WORK_OVERRUN_MS, QUEUE_EXPIRED_TOTAL, DEGRADED_TOTAL, CACHE_READS_TOTAL,
/// ] {
///     assert!(names.contains(&name) && name.starts_with("hopbudget_"));
/// }
/// // A PromQL query built from the names, not from hand-typed strings:
/// let refused_ratio = format!("rate({REFUSED_BEFORE_WORK_TOTAL}[5m]) / rate({ARRIVALS_TOTAL}[5m])");
/// assert!(refused_ratio.contains("hopbudget_arrivals_total"));
/// ```
pub const METRICS: [(&str, &str, &[&str]); 15] = [
    (HOPS_TOTAL, "counter", &["service", "route", "outcome"]),
    (REFUSED_BEFORE_WORK_TOTAL, "counter", &["service", "route"]),
    (DEADLINE_MISSING_TOTAL, "counter", &["service", "route"]),
    (
        MALFORMED_HEADERS_TOTAL,
        "counter",
        &["service", "route", "header"],
    ),
    (REMAINING_AT_ARRIVAL_MS, "histogram", &["service", "route"]),
    (ARRIVALS_TOTAL, "counter", &["service", "route"]),
    (LOW_BUDGET_ARRIVALS_TOTAL, "counter", &["service", "route"]),
    (LATE_WORK_TOTAL, "counter", &["service", "route"]),
    (LATE_WORK_OVERRUN_MS, "histogram", &["service", "route"]),
    (QUEUE_EXPIRED_TOTAL, "counter", &["service", "queue"]),
    (DEGRADED_TOTAL, "counter", &["service", "route", "path"]),
    (
        CACHE_READS_TOTAL,
        "counter",
        &["service", "cache", "choice"],
    ),
    (UNENFORCED_TOTAL, "counter", &["service", "route", "would"]),
    (
        HOP_DURATION_MS,
        "histogram",
        &["service", "route", "outcome"],
    ),
    (BUDGET_USED_RATIO, "histogram", &["service", "route"]),
];

/// Give the current recorder a description and unit for every hopbudget metric, so an
/// exporter can print `# HELP` lines. Call it once after installing the recorder.
///
/// See the [example](crate::observe::prometheus#examples) (feature `prometheus`).
pub fn describe_metrics() {
    use metrics::{describe_counter, describe_histogram};
    describe_counter!(
        HOPS_TOTAL,
        "Hops by terminal status (completed, refused, expired, cancelled)."
    );
    describe_counter!(
        REFUSED_BEFORE_WORK_TOTAL,
        "Requests refused before any work because the budget was below what the route needs."
    );
    describe_counter!(
        DEADLINE_MISSING_TOTAL,
        "Requests that arrived with no deadline and were given the edge total."
    );
    describe_counter!(
        MALFORMED_HEADERS_TOTAL,
        "Malformed deadline headers, by header."
    );
    describe_histogram!(
        REMAINING_AT_ARRIVAL_MS,
        Unit::Milliseconds,
        "Budget left when a request arrived, in milliseconds."
    );
    describe_counter!(ARRIVALS_TOTAL, "Requests that arrived at a hop.");
    describe_counter!(
        LOW_BUDGET_ARRIVALS_TOTAL,
        "Requests that arrived with less than the profile's low_budget_ms left."
    );
    describe_counter!(
        LATE_WORK_TOTAL,
        "Work that finished after its deadline: done for nobody."
    );
    describe_histogram!(
        LATE_WORK_OVERRUN_MS,
        Unit::Milliseconds,
        "How long after its deadline late work finished, in milliseconds."
    );
    describe_counter!(
        QUEUE_EXPIRED_TOTAL,
        "Queue messages dropped because their deadline had passed."
    );
    describe_counter!(
        DEGRADED_TOTAL,
        "Cheaper paths taken because the budget was below the full path's cost."
    );
    describe_counter!(
        UNENFORCED_TOTAL,
        "Hops let through while enforcement was off (C24), by what enforcement would have done: refused, expired or malformed."
    );
    describe_histogram!(
        HOP_DURATION_MS,
        Unit::Milliseconds,
        "How long a hop took from arrival to its terminal status, in milliseconds, by outcome."
    );
    describe_histogram!(
        BUDGET_USED_RATIO,
        "The share of its budget at arrival a hop used (1 is all of it)."
    );
    describe_counter!(
        CACHE_READS_TOTAL,
        "Read-through cache reads by choice: fresh, recomputed, stale (served because a recompute could not finish in the budget) or refused."
    );
}
