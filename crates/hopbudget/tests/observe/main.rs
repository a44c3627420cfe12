//! What a hop shows (C14): the `deadline.*` span fields, the choices made at the bottom of the
//! stack, hop and notice log lines, the OTLP export and its filter, the `hopbudget_*` metrics
//! as Prometheus exposes them, and trace context across hops through OpenTelemetry.
//!
//! One test binary of the integration tests, grouped by area as tonic and axum group theirs
//! (`cargo test -p hopbudget --all-features --test observe`); shared helpers are in
//! `tests/support`. It needs no service and no peer. What it installs process-wide, and how
//! its tests share it:
//!
//! - the `metrics` recorder: one Prometheus recorder, installed once by
//!   `metrics_support::recorder()`; every test that reads it has a service name of its own
//!   (`hop_metrics`, `grpc_metrics`, `http_metrics`, `prometheus`); `hop_duration` and
//!   `metric_handles` record to a recorder local to their thread instead;
//! - the OpenTelemetry text-map propagator (`otel`): W3C trace context, the same in every test
//!   that sets it; with it, every client layer in the binary injects `traceparent`;
//! - `tracing` subscribers only per thread (`tracing::subscriber::set_default`), except
//!   `otlp::install_sets_the_global_subscriber_once`, which installs the global one and so
//!   runs in a process of its own (`support/own_process.rs`), as does `path_flood`, which
//!   measures the process's memory. With no global subscriber, a hop writes a notice (and
//!   spends the process's notice rate limit, which `trace` counts) only on a thread whose
//!   test listens: the metrics tests, which listen to nothing, leave it alone.

#[cfg(all(
    feature = "grpc",
    any(feature = "otlp", feature = "metrics", feature = "otel")
))]
#[path = "../support/grpc/mod.rs"]
mod grpc_support;
#[cfg(all(feature = "axum", feature = "prometheus"))]
#[path = "../support/http.rs"]
mod http_support;
#[cfg(feature = "metrics")]
#[path = "../support/metrics.rs"]
mod metrics_support;
#[cfg(any(feature = "otlp", all(feature = "axum", feature = "prometheus")))]
#[path = "../support/own_process.rs"]
mod own_process;

mod choices;
mod grpc_metrics;
mod hop_duration;
mod hop_metrics;
mod http_metrics;
mod json_lines;
mod metric_handles;
mod otel;
mod otlp;
mod otlp_filter;
mod path_flood;
mod prometheus;
mod trace;
