//! Trace context across hops (feature `otel`): the layers inject it next to the deadline and
//! the server layers continue the caller's trace.
//!
//! The tests install a process-wide global:
//! `opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new())`, which makes
//! every client layer in the process inject `traceparent`. Every test that installs it
//! installs the same propagator, and no other test of the binary reads what a client layer
//! sends, so they share the binary.

mod layers;
mod propagation;
