//! Prometheus exposition for hopbudget's metrics (feature `prometheus`).
//!
//! `metrics-exporter-prometheus` renders histograms as summaries unless it is given buckets;
//! [`builder`] returns a `PrometheusBuilder` with buckets that resolve the last 50 ms of a
//! budget finely, where refusals and low-budget arrivals happen. Add your own exporter
//! settings to it (an HTTP listener, or `install_recorder` and a `/metrics` route of your
//! own) and call [`describe_metrics`](super::describe_metrics) once the recorder is in.
//!
//! The fraction of requests that arrive with little budget left is not a gauge: a gauge would
//! have to pick a window inside the process. It is a ready-made recording rule over two
//! counters instead, [`RECORDING_RULES`], so Prometheus picks the window. The repository's
//! `deploy/prometheus/hopbudget-rules.yml` has these two and the rest: the alerts, each with
//! its runbook in the guide's operations page.
//!
//! # Examples
//!
//! ```
//! use hopbudget::observe::{self, Hop, HopLabels, Protocol};
//! use hopbudget::{HopPolicy, Outcome, RequestBudget};
//! use std::time::Duration;
//!
//! let recorder = observe::prometheus::builder()?.build_recorder();
//! let handle = recorder.handle();
//! metrics::with_local_recorder(&recorder, || {
//!     observe::describe_metrics();
//!     let labels = HopLabels::new("tax", "/tax", Protocol::Http);
//!     let budget = RequestBudget::local(Duration::from_millis(30), HopPolicy::DEFAULT);
//!     Hop::start(&labels, &budget).finish(Outcome::Completed);
//! });
//! let text = handle.render();
//! assert!(text.contains("hopbudget_remaining_at_arrival_ms_bucket{service=\"tax\",route=\"/tax\",le=\"30\"} 1"));
//! assert!(text.contains("hopbudget_hop_duration_ms_bucket{service=\"tax\",route=\"/tax\",outcome=\"completed\",le=\"1050\"} 1"));
//!
//! // Or the buckets added to a builder you configured already.
//! let custom = metrics_exporter_prometheus::PrometheusBuilder::new().add_global_label("zone", "a");
//! let _recorder = observe::prometheus::with_buckets(custom)?.build_recorder();
//!
//! // The bucket bounds, and the recording rules to load into Prometheus.
//! use observe::prometheus::{
//!     BUDGET_USED_BUCKETS, DEFAULT_TIMEOUTS_MS, DURATION_BUCKETS_MS, OVERRUN_BUCKETS_MS,
//!     RECORDING_RULES, REMAINING_BUCKETS_MS,
//! };
//! assert!(REMAINING_BUCKETS_MS.contains(&30.0) && OVERRUN_BUCKETS_MS.contains(&250.0));
//! // A bucket of its own from 0.95T to 1.05T around each common default timeout T.
//! let has = |bound: f64| DURATION_BUCKETS_MS.iter().any(|b| (b - bound).abs() < 1e-6);
//! for t in DEFAULT_TIMEOUTS_MS {
//!     assert!(has(t * 0.95) && has(t * 1.05), "{t}");
//! }
//! assert!(BUDGET_USED_BUCKETS.contains(&1.0));
//! std::fs::write(std::env::temp_dir().join("hopbudget.rules.yml"), RECORDING_RULES).unwrap();
//! # Ok::<(), metrics_exporter_prometheus::BuildError>(())
//! ```

use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder};

use super::{BUDGET_USED_RATIO, HOP_DURATION_MS, LATE_WORK_OVERRUN_MS, REMAINING_AT_ARRIVAL_MS};

/// Bucket bounds (ms) of `hopbudget_remaining_at_arrival_ms`: every 5 ms up to 50, then
/// coarser up to a minute.
///
/// See the [module example](crate::observe::prometheus#examples).
pub const REMAINING_BUCKETS_MS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 35.0, 40.0, 45.0, 50.0, 75.0, 100.0, 150.0, 200.0,
    300.0, 500.0, 750.0, 1000.0, 2000.0, 5000.0, 10000.0, 30000.0, 60000.0,
];

/// Bucket bounds (ms) of `hopbudget_late_work_overrun_ms`.
///
/// See the [module example](crate::observe::prometheus#examples).
pub const OVERRUN_BUCKETS_MS: &[f64] = &[
    1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0,
];

/// Common default timeouts (ms): a client or server that dropped its deadline usually waits
/// one of these. [`DURATION_BUCKETS_MS`] has a narrow bucket around each.
///
/// See the [module example](crate::observe::prometheus#examples).
pub const DEFAULT_TIMEOUTS_MS: &[f64] = &[1000.0, 2000.0, 5000.0, 10000.0, 30000.0];

/// Bucket bounds (ms) of `hopbudget_hop_duration_ms`: coarse, except for a bucket from 0.95T
/// to 1.05T around each default timeout T of [`DEFAULT_TIMEOUTS_MS`], so that hops that end
/// at a default (a dropped deadline: T plus a few milliseconds) land in a bucket of their own
/// instead of a wide one. The rule file `deploy/prometheus/hopbudget-rules.yml` reads these
/// bounds.
///
/// See the [module example](crate::observe::prometheus#examples).
pub const DURATION_BUCKETS_MS: &[f64] = &[
    1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 750.0, 950.0, 1050.0, 1500.0, 1900.0, 2100.0,
    3000.0, 4750.0, 5250.0, 7500.0, 9500.0, 10500.0, 20000.0, 28500.0, 31500.0, 60000.0,
];

/// Bucket bounds of `hopbudget_budget_used_ratio`, the share of its budget a hop used: fine
/// just below and above 1 (all of it).
///
/// See the [module example](crate::observe::prometheus#examples).
pub const BUDGET_USED_BUCKETS: &[f64] = &[
    0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 1.0, 1.05, 1.25, 1.5, 2.0, 5.0,
];

/// Prometheus recording rules (a rule file, YAML): the fraction of arrivals with less than
/// the low-budget threshold left, and the fraction refused before any work, per service and
/// route over five minutes.
///
/// See the [module example](crate::observe::prometheus#examples).
pub const RECORDING_RULES: &str = r#"groups:
  - name: hopbudget
    rules:
      - record: hopbudget:low_budget_arrivals:ratio_rate5m
        expr: |
          sum by (service, route) (rate(hopbudget_low_budget_arrivals_total[5m]))
          /
          sum by (service, route) (rate(hopbudget_arrivals_total[5m]))
      - record: hopbudget:refused_before_work:ratio_rate5m
        expr: |
          sum by (service, route) (rate(hopbudget_refused_before_work_total[5m]))
          /
          sum by (service, route) (rate(hopbudget_arrivals_total[5m]))
"#;

/// A `PrometheusBuilder` with hopbudget's histogram buckets.
///
/// # Errors
/// Only if the exporter rejects the bucket lists, which are fixed and non-empty.
///
/// See the [module example](crate::observe::prometheus#examples).
pub fn builder() -> Result<PrometheusBuilder, BuildError> {
    with_buckets(PrometheusBuilder::new())
}

/// Add hopbudget's histogram buckets to an existing `builder`.
///
/// # Errors
/// Only if the exporter rejects the bucket lists, which are fixed and non-empty.
///
/// See the [module example](crate::observe::prometheus#examples).
pub fn with_buckets(builder: PrometheusBuilder) -> Result<PrometheusBuilder, BuildError> {
    builder
        .set_buckets_for_metric(
            Matcher::Full(REMAINING_AT_ARRIVAL_MS.to_owned()),
            REMAINING_BUCKETS_MS,
        )?
        .set_buckets_for_metric(
            Matcher::Full(LATE_WORK_OVERRUN_MS.to_owned()),
            OVERRUN_BUCKETS_MS,
        )?
        .set_buckets_for_metric(
            Matcher::Full(HOP_DURATION_MS.to_owned()),
            DURATION_BUCKETS_MS,
        )?
        .set_buckets_for_metric(
            Matcher::Full(BUDGET_USED_RATIO.to_owned()),
            BUDGET_USED_BUCKETS,
        )
}
