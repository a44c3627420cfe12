//! What a hop shows (C14) without a process-wide subscriber or recorder: the `deadline.*`
//! span fields, the choices made at the bottom of the stack, hop and notice log lines, and the
//! OTLP export's filter.
//!
//! One test binary of the integration tests, grouped by area as tonic and axum group theirs
//! (`cargo test -p hopbudget --all-features --test observe`). Each test installs its
//! subscriber for its own thread (`tracing::subscriber::set_default`); the tests that install
//! a global subscriber or metrics recorder are binaries of their own (`observe_otlp`,
//! `observe_prometheus`, `observe_http_metrics`, `grpc_metrics`, `path_flood`, `hop_metrics`).

#[cfg(all(feature = "grpc", feature = "otlp"))]
#[path = "../support/grpc/mod.rs"]
mod grpc_support;

mod choices;
mod json_lines;
mod otlp_filter;
mod trace;
