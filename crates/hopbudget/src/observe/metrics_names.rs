//! Metric names and their recording, through the `metrics` facade.

use std::time::Duration;

use super::HopLabels;
use crate::context::Source;
use crate::status::Outcome;

/// Counter: hops by terminal status. Labels: `service`, `route`, `outcome`.
pub const HOPS_TOTAL: &str = "hopbudget_hops_total";
/// Counter: requests refused before any work. Labels: `service`, `route`.
pub const REFUSED_BEFORE_WORK_TOTAL: &str = "hopbudget_refused_before_work_total";
/// Counter: arrivals with no deadline, given the edge total. Labels: `service`, `route`.
pub const DEADLINE_MISSING_TOTAL: &str = "hopbudget_deadline_missing_total";
/// Counter: malformed deadline headers. Labels: `service`, `route`, `header`.
pub const MALFORMED_HEADERS_TOTAL: &str = "hopbudget_malformed_headers_total";
/// Histogram: remaining budget at arrival, ms. Labels: `service`, `route`.
pub const REMAINING_AT_ARRIVAL_MS: &str = "hopbudget_remaining_at_arrival_ms";
/// Counter: arrivals. Labels: `service`, `route`.
pub const ARRIVALS_TOTAL: &str = "hopbudget_arrivals_total";
/// Counter: arrivals with less than the profile's `low_budget_ms`. Labels: `service`, `route`.
pub const LOW_BUDGET_ARRIVALS_TOTAL: &str = "hopbudget_low_budget_arrivals_total";
/// Counter: work that finished after its deadline. Labels: `service`, `route`.
pub const LATE_WORK_TOTAL: &str = "hopbudget_late_work_total";
/// Histogram: how long after the deadline late work finished, ms. Labels: `service`, `route`.
pub const LATE_WORK_OVERRUN_MS: &str = "hopbudget_late_work_overrun_ms";
/// Counter: queue messages dropped as expired. Labels: `service`, `queue`.
pub const QUEUE_EXPIRED_TOTAL: &str = "hopbudget_queue_expired_total";

/// Below this many ms an arrival counts as low-budget. The profile's `low_budget_ms` sets it
/// per layer; this is the default.
pub(crate) const LOW_BUDGET_MS: u64 = 50;

pub(super) fn record_arrival(labels: &HopLabels, remaining_ms: u64, source: Source) {
    let service = labels.service.to_string();
    let route = labels.route.to_string();
    metrics::counter!(ARRIVALS_TOTAL, "service" => service.clone(), "route" => route.clone())
        .increment(1);
    metrics::histogram!(REMAINING_AT_ARRIVAL_MS, "service" => service.clone(), "route" => route.clone())
        .record(remaining_ms as f64);
    if source == Source::Fallback {
        metrics::counter!(DEADLINE_MISSING_TOTAL, "service" => service.clone(), "route" => route.clone())
            .increment(1);
    }
    if remaining_ms < LOW_BUDGET_MS {
        metrics::counter!(LOW_BUDGET_ARRIVALS_TOTAL, "service" => service, "route" => route)
            .increment(1);
    }
}

pub(super) fn record_end(labels: &HopLabels, outcome: Outcome) {
    let service = labels.service.to_string();
    let route = labels.route.to_string();
    if outcome == Outcome::Refused {
        metrics::counter!(REFUSED_BEFORE_WORK_TOTAL, "service" => service.clone(), "route" => route.clone())
            .increment(1);
    }
    metrics::counter!(HOPS_TOTAL, "service" => service, "route" => route, "outcome" => outcome.as_str())
        .increment(1);
}

pub(super) fn record_late(labels: &HopLabels, overrun: Duration) {
    let service = labels.service.to_string();
    let route = labels.route.to_string();
    metrics::counter!(LATE_WORK_TOTAL, "service" => service.clone(), "route" => route.clone())
        .increment(1);
    metrics::histogram!(LATE_WORK_OVERRUN_MS, "service" => service, "route" => route)
        .record(overrun.as_secs_f64() * 1000.0);
}

pub(super) fn record_malformed(labels: &HopLabels, header: &str) {
    metrics::counter!(
        MALFORMED_HEADERS_TOTAL,
        "service" => labels.service.to_string(),
        "route" => labels.route.to_string(),
        "header" => header.to_owned()
    )
    .increment(1);
}

pub(super) fn record_queue_expired(service: &str, queue: &str) {
    metrics::counter!(QUEUE_EXPIRED_TOTAL, "service" => service.to_owned(), "queue" => queue.to_owned())
        .increment(1);
}
