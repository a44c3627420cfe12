//! The one process-wide `metrics` recorder of a test binary: a Prometheus recorder built by
//! `observe::prometheus::builder()` (hopbudget's histogram buckets) and installed on first use.
//!
//! A process can install one global recorder, and a held metric handle belongs to the recorder
//! that made it (`observe::metrics_names::held`), so every test of a binary that reads metrics
//! from the global recorder shares this one. They run in parallel: each test reads only its
//! own series, by a service name no other test of the binary uses (every hop of every test
//! records here unless its thread has a local recorder). Call [`recorder`] before building
//! the layers under test, so their first hop already records here.
#![allow(dead_code, unreachable_pub)]

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// The process-wide Prometheus recorder, installed on first use.
pub fn recorder() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        builder()
            .install_recorder()
            .expect("the only recorder this binary installs")
    })
}

#[cfg(feature = "prometheus")]
fn builder() -> PrometheusBuilder {
    hopbudget::observe::prometheus::builder().expect("hopbudget's buckets")
}

/// Without feature `prometheus` (hopbudget's buckets) the exporter's own defaults, which
/// render the counters the same.
#[cfg(not(feature = "prometheus"))]
fn builder() -> PrometheusBuilder {
    PrometheusBuilder::new()
}

/// The value of the sample `name{labels}` exactly (labels in the order the exporter writes
/// them), from Prometheus text.
pub fn sample(text: &str, name: &str, labels: &str) -> Option<f64> {
    let series = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .map(|v| v.parse().unwrap())
}
