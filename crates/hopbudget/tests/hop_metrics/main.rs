//! What a hop records, read from the Prometheus recorder as a dashboard reads it: answers
//! delivered in full over HTTP and gRPC are `completed` (C17, C14), method labels are minted
//! only for real methods, those a descriptor set declares from their first call (C20), and a handler's own `BudgetError` is the hop's outcome (C17).
//!
//! A binary of its own because it installs the process-wide metrics recorder
//! (`metrics::set_global_recorder`, through `install_recorder`). Its modules share that
//! one recorder, built by `observe::prometheus::builder()` and installed once by
//! [`recorder`]; each test has its own service name, so they run in parallel
//! (`cargo test -p hopbudget --all-features --test hop_metrics`).

#[cfg(all(feature = "grpc", feature = "prometheus"))]
#[path = "../support/grpc/mod.rs"]
mod grpc_support;

mod grpc_declared;
mod grpc_delivered;
mod handler_errors;
mod http_delivered;

/// The process-wide Prometheus recorder, installed on first use.
#[cfg(feature = "prometheus")]
fn recorder() -> &'static metrics_exporter_prometheus::PrometheusHandle {
    static HANDLE: std::sync::OnceLock<metrics_exporter_prometheus::PrometheusHandle> =
        std::sync::OnceLock::new();
    HANDLE.get_or_init(|| {
        hopbudget::observe::prometheus::builder()
            .unwrap()
            .install_recorder()
            .unwrap()
    })
}
