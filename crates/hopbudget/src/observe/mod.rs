//! What each hop reports, so operators can see where the budget goes (rule [C14](crate::contract#c14)).
//!
//! Every server-side hop (HTTP, gRPC, queue consumer) opens a [`Hop`] when a request arrives
//! and closes it with the terminal status. A `Hop` owns a `tracing` span carrying the
//! `deadline.*` fields below and, with the `metrics` feature, updates the `hopbudget_*`
//! metrics through the `metrics` facade ([`METRICS`] lists name, type and labels of each).
//! With no subscriber and no recorder installed both are close to free: a hop records
//! nothing on a disabled span and allocates nothing for its metrics.
//!
//! | when | span field | meaning |
//! |---|---|---|
//! | start | `deadline.remaining_ms` | budget left when the request arrived |
//! | start | `deadline.source` | the carrier it came from, or `fallback` ([C8](crate::contract#c8)) |
//! | start | `deadline.margin_ms` | hop margin + transit allowance this hop keeps back |
//! | end | `deadline.outcome` | `completed`, `refused`, `expired` or `cancelled` |
//! | end, refused | `deadline.required_ms` | what the hop needed |
//! | end, late work | `deadline.overrun_ms` | how long after the deadline the work finished |
//! | end, answered | `http.response.status_code` / `rpc.grpc.status_code` | the status the caller got |
//!
//! `completed` means the deadline contract held (the answer went out in time, whatever it
//! said), so a handler's 404 and 500 are `completed` too; the status field beside it tells
//! them apart, with no second layer.
//! The span also carries `otel.name` (the route), `otel.kind` (`server` or `consumer`),
//! `service.name` and `hop.protocol`. Millisecond fields are `i64` so tracing-opentelemetry
//! turns them into integer attributes under the same names.
//!
//! Exporters: [`prometheus`] (feature `prometheus`) builds a Prometheus recorder with
//! hopbudget's histogram buckets and carries the recording rules; [`otlp`] (feature `otlp`)
//! writes spans to a file as OTLP JSON.
//!
//! [`Hop`] is defined beside the hop it records (`src/hop/record.rs`) and named here, where users
//! have always named it; that re-export is this module's one import that runs up.
//!
//! See the example on [`Hop`].
//!
//! Guide: *Observability*, `docs/guide/observability.md` in the repository.

#[cfg(feature = "metrics")]
pub(crate) mod metrics_names;
#[cfg(feature = "metrics")]
pub use metrics_names::*;
mod counter;
pub(crate) use counter::Counter;
pub use counter::{OTHER_CALLEE, outbound_missing, outbound_missing_to};
pub mod fields;
pub(crate) mod notice;
pub(crate) use notice::{missing as notice_missing, refused as notice_refused};
#[cfg(feature = "otlp")]
pub mod otlp;
#[cfg(feature = "prometheus")]
pub mod prometheus;
#[cfg(feature = "otel")]
pub mod propagation;
pub(crate) mod trace_context;
pub(crate) use trace_context::{TraceParent, add_link, current_position, follow_remote_parent};
pub(crate) mod labels;
pub use labels::{DEFAULT_LOW_BUDGET, HopLabels, Protocol};
// The hop's record lives beside the hop (`hop/record.rs`); its public name is here, with
// the span fields, metric names and exporters it reports through.
// The one import here that runs up: the hop's record lives beside the hop (`hop/record.rs`),
// and `observe::Hop` is where the README, the guides and users' code have always named it.
pub use crate::hop::record::Hop;

/// Count a malformed deadline header (rule [C9](crate::contract#c9)).
///
/// ```
/// use hopbudget::observe::{HopLabels, Protocol, malformed_header};
///
/// let labels = HopLabels::new("tax", "/tax", Protocol::Http);
/// malformed_header(&labels, "x-request-timeout-ms"); // hopbudget_malformed_headers_total + 1
/// ```
pub fn malformed_header(labels: &HopLabels, header: &str) {
    tracing::debug!(service = %labels.service, route = %labels.route, header, "malformed deadline header");
    #[cfg(feature = "metrics")]
    metrics_names::record_malformed(labels, header);
    #[cfg(not(feature = "metrics"))]
    let _ = (labels, header);
}

/// Count a queue message dropped because its deadline had passed (scenario [S10](crate::contract#s10)).
///
/// ```
/// hopbudget::observe::queue_expired("billing", "orders"); // hopbudget_queue_expired_total + 1
/// ```
pub fn queue_expired(service: &str, queue: &str) {
    tracing::debug!(service, queue, "queue message dropped: deadline passed");
    #[cfg(feature = "metrics")]
    metrics_names::record_queue_expired(service, queue);
}
