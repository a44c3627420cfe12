//! `hopbudget audit`: what it finds in traces, from files (the Python SDK's spans, the
//! library's own, a sidecar fleet's), from an OTLP/HTTP listener and from Kafka; its report as
//! a table, JSON and HTML, merged across instances. One test binary, a module per behaviour.
//!
//! `library_spans` sets the global OpenTelemetry propagator (W3C trace context); no other
//! test here reads it, or depends on it being unset: the others audit spans written before
//! the test (files) or by other processes.

#[path = "../support/mod.rs"]
mod support;

mod html;
mod input;
#[cfg(feature = "kafka")]
mod kafka;
mod late_tolerance;
mod library_spans;
mod listen;
mod merge;
mod plain_otel;
mod reset_severity;
mod rollout;
mod sidecar;
