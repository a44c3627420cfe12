//! Metric names and their recording, through the `metrics` facade.
//!
//! Every name, type and label is listed in the README's "Observability" section. Keys for a
//! service and route are built once per [`HopLabels`] (shared by its clones) and handed to
//! whatever recorder is current, so a hop allocates nothing for its metrics, and with no
//! recorder installed each update is a thread-local check and a no-op call.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics::{Key, Label, Level, Metadata, Unit};

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

/// Every metric hopbudget records: name, Prometheus type, labels.
pub const METRICS: [(&str, &str, &[&str]); 10] = [
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
];

/// Give the current recorder a description and unit for every hopbudget metric, so an
/// exporter can print `# HELP` lines. Call it once after installing the recorder.
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
}

static METADATA: Metadata<'static> = Metadata::new(
    "hopbudget::observe",
    Level::INFO,
    Some("hopbudget::observe"),
);

/// Metric keys for one service and route, built on first use.
#[derive(Debug)]
pub(super) struct KeyCache {
    // The label values the keys are built from; a `HopLabels` whose public fields were
    // changed after construction no longer matches them and gets fresh keys.
    service: Arc<str>,
    route: Arc<str>,
    arrivals: OnceLock<Key>,
    remaining: OnceLock<Key>,
    missing: OnceLock<Key>,
    low: OnceLock<Key>,
    refused: OnceLock<Key>,
    late: OnceLock<Key>,
    overrun: OnceLock<Key>,
    hops: [OnceLock<Key>; 4],
}

impl KeyCache {
    pub(super) fn new(service: &Arc<str>, route: &Arc<str>) -> Self {
        Self {
            service: service.clone(),
            route: route.clone(),
            arrivals: OnceLock::new(),
            remaining: OnceLock::new(),
            missing: OnceLock::new(),
            low: OnceLock::new(),
            refused: OnceLock::new(),
            late: OnceLock::new(),
            overrun: OnceLock::new(),
            hops: [const { OnceLock::new() }; 4],
        }
    }
}

fn route_labels(labels: &HopLabels) -> Vec<Label> {
    vec![
        Label::new("service", labels.service.clone()),
        Label::new("route", labels.route.clone()),
    ]
}

fn key<'a>(
    labels: &'a HopLabels,
    slot: impl FnOnce(&'a KeyCache) -> &'a OnceLock<Key>,
    build: impl FnOnce() -> Key,
) -> Cow<'a, Key> {
    let cache = &*labels.keys;
    if Arc::ptr_eq(&cache.service, &labels.service) && Arc::ptr_eq(&cache.route, &labels.route) {
        Cow::Borrowed(slot(cache).get_or_init(build))
    } else {
        Cow::Owned(build())
    }
}

fn route_key<'a>(
    labels: &'a HopLabels,
    name: &'static str,
    slot: impl FnOnce(&'a KeyCache) -> &'a OnceLock<Key>,
) -> Cow<'a, Key> {
    key(labels, slot, || Key::from_parts(name, route_labels(labels)))
}

fn increment(key: &Key) {
    metrics::with_recorder(|r| r.register_counter(key, &METADATA).increment(1));
}

fn observe(key: &Key, value: f64) {
    metrics::with_recorder(|r| r.register_histogram(key, &METADATA).record(value));
}

fn outcome_index(outcome: Outcome) -> usize {
    match outcome {
        Outcome::Completed => 0,
        Outcome::Refused => 1,
        Outcome::Expired => 2,
        Outcome::Cancelled => 3,
    }
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub(super) fn record_arrival(labels: &HopLabels, remaining: Duration, source: Source) {
    increment(&route_key(labels, ARRIVALS_TOTAL, |c| &c.arrivals));
    observe(
        &route_key(labels, REMAINING_AT_ARRIVAL_MS, |c| &c.remaining),
        millis(remaining),
    );
    if source == Source::Fallback {
        increment(&route_key(labels, DEADLINE_MISSING_TOTAL, |c| &c.missing));
    }
    if remaining < labels.low_budget {
        increment(&route_key(labels, LOW_BUDGET_ARRIVALS_TOTAL, |c| &c.low));
    }
}

pub(super) fn record_end(labels: &HopLabels, outcome: Outcome) {
    if outcome == Outcome::Refused {
        increment(&route_key(labels, REFUSED_BEFORE_WORK_TOTAL, |c| {
            &c.refused
        }));
    }
    let i = outcome_index(outcome);
    let hops = key(
        labels,
        |c| &c.hops[i],
        || {
            let mut l = route_labels(labels);
            l.push(Label::from_static_parts("outcome", outcome.as_str()));
            Key::from_parts(HOPS_TOTAL, l)
        },
    );
    increment(&hops);
}

pub(super) fn record_late(labels: &HopLabels, overrun: Duration) {
    increment(&route_key(labels, LATE_WORK_TOTAL, |c| &c.late));
    observe(
        &route_key(labels, LATE_WORK_OVERRUN_MS, |c| &c.overrun),
        millis(overrun),
    );
}

pub(super) fn record_malformed(labels: &HopLabels, header: &str) {
    let mut l = route_labels(labels);
    l.push(Label::new("header", header.to_owned()));
    increment(&Key::from_parts(MALFORMED_HEADERS_TOTAL, l));
}

pub(super) fn record_queue_expired(service: &str, queue: &str) {
    increment(&Key::from_parts(
        QUEUE_EXPIRED_TOTAL,
        vec![
            Label::new("service", service.to_owned()),
            Label::new("queue", queue.to_owned()),
        ],
    ));
}
