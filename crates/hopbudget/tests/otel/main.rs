//! Trace context across hops (feature `otel`): the layers inject it next to the deadline and
//! the server layers continue the caller's trace.
//!
//! A binary of its own because its tests install a process-wide global:
//! `opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new())`, which makes
//! every client layer in the process inject `traceparent`. Both modules install the same
//! propagator, so they share this binary
//! (`cargo test -p hopbudget --all-features --test otel`).

#[cfg(all(
    feature = "otel",
    feature = "reqwest",
    feature = "axum",
    feature = "grpc"
))]
#[path = "../support/grpc/mod.rs"]
mod grpc_support;

mod layers;
mod propagation;
