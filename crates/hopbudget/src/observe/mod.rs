//! What each hop reports, so operators can see where the budget goes (rule C14).
//!
//! Every server-side hop (HTTP, gRPC, queue consumer) opens a [`Hop`] when a request arrives
//! and closes it with the terminal status. A `Hop` owns a `tracing` span carrying the
//! `deadline.*` fields below and, with the `metrics` feature, updates the `hopbudget_*`
//! metrics through the `metrics` facade. With no subscriber and no recorder installed both are
//! close to free.
//!
//! | when | span field | meaning |
//! |---|---|---|
//! | start | `deadline.remaining_ms` | budget left when the hop began |
//! | start | `deadline.source` | the carrier it came from, or `fallback` (C8) |
//! | start | `deadline.margin_ms` | hop margin + transit allowance this hop keeps back |
//! | end | `deadline.outcome` | `completed`, `refused`, `expired` or `cancelled` |
//! | end, refused | `deadline.required_ms` | what the hop needed |
//! | end, late work | `deadline.overrun_ms` | how long after the deadline the work finished |

use std::sync::Arc;
use std::time::Duration;

use tracing::Span;
use tracing::field::Empty;

use crate::context::{RequestBudget, Source};
use crate::status::Outcome;

#[cfg(feature = "metrics")]
mod metrics_names;
#[cfg(feature = "metrics")]
pub use metrics_names::*;

/// The protocol a hop speaks, for the span's `rpc.system` / `network.protocol.name`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// An HTTP request.
    Http,
    /// A gRPC call.
    Grpc,
    /// A queue message.
    Queue,
}

impl Protocol {
    /// Lower-case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Grpc => "grpc",
            Protocol::Queue => "queue",
        }
    }
}

/// Labels shared by every hop of one service and route.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct HopLabels {
    /// The service name (from the profile).
    pub service: Arc<str>,
    /// The route: a matched path pattern, a gRPC method path, or a queue name. Keep it low
    /// in cardinality: never a raw path with ids in it.
    pub route: Arc<str>,
    /// The protocol.
    pub protocol: Protocol,
}

impl HopLabels {
    /// Labels for `service` and `route` over `protocol`.
    pub fn new(
        service: impl Into<Arc<str>>,
        route: impl Into<Arc<str>>,
        protocol: Protocol,
    ) -> Self {
        Self {
            service: service.into(),
            route: route.into(),
            protocol,
        }
    }
}

/// One hop, from arrival to terminal status.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use hopbudget::observe::{Hop, HopLabels, Protocol};
/// use hopbudget::{HopPolicy, Outcome, RequestBudget};
///
/// let labels = HopLabels::new("tax", "/tax", Protocol::Http);
/// let budget = RequestBudget::local(Duration::from_millis(120), HopPolicy::DEFAULT);
/// let hop = Hop::start(&labels, &budget);
/// // ... run the handler inside `hop.span()` ...
/// hop.finish(Outcome::Completed);
/// # }
/// ```
#[derive(Debug)]
pub struct Hop {
    span: Span,
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    labels: HopLabels,
    finished: bool,
}

impl Hop {
    /// Open a hop for a request that arrived with `budget`: create its span and count the
    /// arrival (remaining budget, missing deadline, low budget).
    pub fn start(labels: &HopLabels, budget: &RequestBudget) -> Self {
        let remaining_ms = budget.remaining().as_millis() as u64;
        let source = budget.source();
        let span = tracing::info_span!(
            "hop",
            otel.name = %labels.route,
            service.name = %labels.service,
            hop.protocol = labels.protocol.as_str(),
            deadline.remaining_ms = remaining_ms,
            deadline.source = source.as_str(),
            deadline.margin_ms = budget.policy().reserve().as_millis() as u64,
            deadline.outcome = Empty,
            deadline.required_ms = Empty,
            deadline.overrun_ms = Empty,
        );
        if source == Source::Fallback {
            tracing::debug!(parent: &span, "deadline received: none; using the edge total");
        }
        #[cfg(feature = "metrics")]
        metrics_names::record_arrival(labels, remaining_ms, source);
        Self {
            span,
            labels: labels.clone(),
            finished: false,
        }
    }

    /// The hop's span: run the handler inside it.
    pub fn span(&self) -> &Span {
        &self.span
    }

    /// Close the hop with its terminal status.
    pub fn finish(mut self, outcome: Outcome) {
        self.close(outcome, None, None);
    }

    /// Close the hop as refused before any work (rule C3).
    pub fn refuse(mut self, required: Duration) {
        self.close(Outcome::Refused, Some(required), None);
    }

    /// Record that the hop's work finished `overrun` after its deadline: work done for nobody.
    /// The hop's outcome stays what the caller saw (usually `expired`).
    pub fn late_work(&self, overrun: Duration) {
        self.span
            .record("deadline.overrun_ms", overrun.as_millis() as u64);
        #[cfg(feature = "metrics")]
        metrics_names::record_late(&self.labels, overrun);
    }

    fn close(&mut self, outcome: Outcome, required: Option<Duration>, _overrun: Option<Duration>) {
        if self.finished {
            return;
        }
        self.finished = true;
        self.span.record("deadline.outcome", outcome.as_str());
        if let Some(required) = required {
            self.span
                .record("deadline.required_ms", required.as_millis() as u64);
        }
        #[cfg(feature = "metrics")]
        metrics_names::record_end(&self.labels, outcome);
    }
}

impl Drop for Hop {
    fn drop(&mut self) {
        // A hop dropped without a status was abandoned by its caller: the future was dropped.
        if !self.finished {
            self.close(Outcome::Cancelled, None, None);
        }
    }
}

/// Count a malformed deadline header (rule C9).
pub fn malformed_header(labels: &HopLabels, header: &str) {
    tracing::debug!(service = %labels.service, route = %labels.route, header, "malformed deadline header");
    #[cfg(feature = "metrics")]
    metrics_names::record_malformed(labels, header);
    #[cfg(not(feature = "metrics"))]
    let _ = (labels, header);
}

/// Count a queue message dropped because its deadline had passed (scenario S10).
pub fn queue_expired(service: &str, queue: &str) {
    tracing::debug!(service, queue, "queue message dropped: deadline passed");
    #[cfg(feature = "metrics")]
    metrics_names::record_queue_expired(service, queue);
}
