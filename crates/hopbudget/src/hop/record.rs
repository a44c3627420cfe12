//! [`Hop`]: one hop's record, opened when a request arrives and finished with its terminal
//! status: its `tracing` span, its metrics and, when asked for, its one log line ([C14](crate::contract#c14)).
//! It lives beside the hop it records; users name it `observe::Hop`, where the span fields,
//! metric names and exporters it reports through are.

use std::sync::Arc;
use std::time::Duration;

use tracing::Span;
use tracing::field::Empty;

use crate::budget::{RequestBudget, Source};
use crate::observe::fields;
use crate::observe::labels::{HopLabels, HopRoute, Protocol};
#[cfg(feature = "metrics")]
use crate::observe::metrics_names;
use crate::observe::notice;
use crate::observe::trace_context::TraceParent;
use crate::outcome::Outcome;

/// The status a hop's caller was answered with: an HTTP status or a gRPC code. Recorded on
/// the hop's span as `http.response.status_code` or `rpc.grpc.status_code` (OpenTelemetry's
/// names) and written in its log line, so that a dashboard can tell a `completed` 200 from
/// a `completed` 404 or 500: `completed` says the deadline contract held, not that the
/// answer was a success.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AnswerStatus {
    /// An HTTP status code.
    Http(u16),
    /// A gRPC status code.
    Grpc(i32),
}

/// What a hop keeps to write its one line at the end (`log.hops`): kept, boxed, only when
/// the line is asked for, so a hop without it carries one empty pointer.
#[derive(Debug)]
struct HopLine {
    service: Arc<str>,
    route: Arc<str>,
    protocol: Protocol,
    arrived: Duration,
    source: Source,
    started: tokio::time::Instant,
    status: Option<AnswerStatus>,
    /// Enforcement was off and would have done this ([C24](crate::contract#c24)).
    would: Option<Would>,
    /// The W3C trace id the caller sent in `traceparent`, so a line can be found from a trace
    /// (and the hops of one request across services from each other's lines).
    trace_id: Option<u128>,
}

/// The target of a hop's line (`log.hops`): a subscriber filters it by this name.
const LINE_TARGET: &str = "hopbudget::hop";

/// The target of a hop's span and its debug events: the one they had while this file was
/// `observe/hop.rs`. Subscribers' filters and the sidecar (which keeps the span out of its log
/// lines and turns it into its OTLP hop span) name it, so the move beside the hop leaves it.
const SPAN_TARGET: &str = "hopbudget::observe::hop";

/// A trace id as W3C and OpenTelemetry write it: 32 lowercase hex digits.
struct TraceHex(u128);

impl std::fmt::Display for TraceHex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// What enforcement would have done to a hop that ran with enforcement off (rule [C24](crate::contract#c24)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Would {
    /// A deadline header that could not be read: answered 400 / INVALID_ARGUMENT.
    Malformed,
    /// No budget left on arrival, or the answer completed after the deadline.
    Expired,
    /// Less budget than the route needs: refused before work, needing this much.
    Refused(Duration),
}

impl Would {
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Would::Malformed => "malformed",
            Would::Expired => "expired",
            Would::Refused(_) => "refused",
        }
    }
}

/// One hop, from arrival to terminal status.
///
/// # Examples
///
/// A queue consumer or a custom server opens one hop per request (the HTTP and gRPC layers do
/// this themselves):
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use hopbudget::observe::{Hop, HopLabels, Protocol};
/// use hopbudget::{HopPolicy, Outcome, RequestBudget};
///
/// // Labels once per route; the low-budget threshold usually comes from the profile.
/// use hopbudget::observe::DEFAULT_LOW_BUDGET;
/// let labels = HopLabels::new("tax", "/tax", Protocol::Http);
/// assert_eq!(labels.low_budget(), DEFAULT_LOW_BUDGET);
/// let labels = labels.with_low_budget(Duration::from_millis(80));
/// assert_eq!(labels.low_budget(), Duration::from_millis(80));
/// assert_eq!((Protocol::Http.as_str(), Protocol::Queue.span_kind()), ("http", "consumer"));
///
/// let budget = RequestBudget::local(Duration::from_millis(120), HopPolicy::DEFAULT);
/// let hop = Hop::start(&labels, &budget);
/// hop.span().in_scope(|| { /* the handler, inside the hop's span */ });
/// hop.finish(Outcome::Completed);
///
/// // A route known only per request, and a refusal before work (C3).
/// let service: Arc<str> = Arc::from("tax");
/// let labels = HopLabels::for_route(&service, "/tax/{id}", Protocol::Http);
/// let short = RequestBudget::local(Duration::from_millis(30), HopPolicy::DEFAULT);
/// Hop::start(&labels, &short).refuse(Duration::from_millis(200));
///
/// // Work that finished after its deadline is counted as late (C14).
/// let hop = Hop::start(&labels, &budget);
/// hop.late_work(Duration::from_millis(15));
/// hop.finish(Outcome::Expired);
/// # }
/// ```
#[derive(Debug)]
pub struct Hop {
    span: Span,
    // The metric keys of the hop's service and route; with the `metrics` feature off a hop
    // keeps nothing of its labels.
    #[cfg(feature = "metrics")]
    keys: metrics_names::Keys,
    line: Option<Box<HopLine>>,
    // An arrival not counted yet: the hop's label is settled only at its end (see
    // `open_unlabelled`).
    #[cfg(feature = "metrics")]
    arrival: Option<Arrival>,
    // When the request arrived and the budget it arrived with: the hop's duration and the
    // share of its budget it used, recorded at its end.
    #[cfg(feature = "metrics")]
    opened: (tokio::time::Instant, Duration),
    finished: bool,
    /// What enforcement would have done was recorded already ([C24](crate::contract#c24)): once per hop.
    unenforced: bool,
}

/// What [`Hop::open`] counts on arrival, kept by a hop whose label is not settled yet.
#[cfg(feature = "metrics")]
#[derive(Debug, Clone, Copy)]
struct Arrival {
    low_budget: Duration,
    remaining: Duration,
    source: Source,
}

/// When the request of `budget` arrived: its deadline less the budget it arrived with, so
/// that opening a hop reads no clock. A request that arrived with nothing left (its deadline
/// may be long past) reads the clock instead.
#[cfg(feature = "metrics")]
fn arrived_at(budget: &RequestBudget) -> tokio::time::Instant {
    let remaining = budget.at_arrival();
    match budget.deadline().instant().checked_sub(remaining) {
        Some(at) if !remaining.is_zero() => at,
        _ => tokio::time::Instant::now(),
    }
}

impl Hop {
    /// Open a hop for a request that arrived with `budget`: create its span and count the
    /// arrival (remaining budget, missing deadline, low budget).
    ///
    /// See the [example](Self#examples).
    pub fn start(labels: &HopLabels, budget: &RequestBudget) -> Self {
        #[cfg(feature = "metrics")]
        let keys = metrics_names::KeyCache::of(labels);
        Self::open(
            HopRoute {
                service: &labels.service,
                route: &labels.route,
                protocol: labels.protocol,
                low_budget: labels.low_budget,
                line: false,
                #[cfg(feature = "metrics")]
                keys,
            },
            budget,
        )
    }

    /// [`start`](Self::start) from borrowed labels: the server layers call this on every
    /// request, and building a [`HopLabels`] would clone two shared strings only to drop them.
    pub(crate) fn open(route: HopRoute<'_>, budget: &RequestBudget) -> Self {
        Self::opened(route, budget, true)
    }

    /// [`open`](Self::open) under a provisional label: the arrival is counted when the hop
    /// closes, under the label it has then, which [`relabel`](Self::relabel) may change. A
    /// gRPC call to a method the server has not answered yet ([C20](crate::contract#c20)): its arrival and its end
    /// land in the same series, whichever that turns out to be.
    pub(crate) fn open_unlabelled(route: HopRoute<'_>, budget: &RequestBudget) -> Self {
        Self::opened(route, budget, false)
    }

    fn opened(route: HopRoute<'_>, budget: &RequestBudget, count_now: bool) -> Self {
        let remaining = budget.at_arrival();
        let remaining_ms = span_ms(remaining);
        let source = budget.source();
        // The names are `fields`' constants, in `fields::HOP_FIELDS`' order (a test checks).
        let span = tracing::info_span!(
            target: SPAN_TARGET,
            fields::HOP_SPAN,
            { fields::ROUTE } = %route.route,
            { fields::KIND } = route.protocol.span_kind(),
            { fields::SERVICE } = %route.service,
            { fields::PROTOCOL } = route.protocol.as_str(),
            { fields::REMAINING_MS } = remaining_ms,
            { fields::SOURCE } = source.as_str(),
            { fields::MARGIN_MS } = span_ms(budget.policy().reserve()),
            { fields::OUTCOME } = Empty,
            { fields::REQUIRED_MS } = Empty,
            { fields::OVERRUN_MS } = Empty,
            { fields::UNENFORCED } = Empty,
            { fields::HTTP_STATUS } = Empty,
            { fields::GRPC_STATUS } = Empty,
        );
        if source == Source::Fallback {
            tracing::debug!(
                target: SPAN_TARGET,
                parent: &span,
                "deadline received: none; using the edge total"
            );
        }
        #[cfg(feature = "metrics")]
        let arrival = Arrival {
            low_budget: route.low_budget,
            remaining,
            source,
        };
        #[cfg(feature = "metrics")]
        if count_now {
            metrics_names::record_arrival(&route.keys, route.low_budget, remaining, source);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (route.low_budget, count_now);
        // The line only when it is on and a subscriber would take it (#51): otherwise
        // nobody reads it, and building it costs allocations on every request.
        let line = (route.line && tracing::enabled!(target: LINE_TARGET, tracing::Level::INFO))
            .then(|| {
                let (service, route_label) = route.shared_strings();
                Box::new(HopLine {
                    service,
                    route: route_label,
                    protocol: route.protocol,
                    arrived: remaining,
                    source,
                    started: tokio::time::Instant::now(),
                    status: None,
                    would: None,
                    trace_id: None,
                })
            });
        Self {
            span,
            #[cfg(feature = "metrics")]
            keys: route.keys,
            line,
            #[cfg(feature = "metrics")]
            arrival: (!count_now).then_some(arrival),
            #[cfg(feature = "metrics")]
            opened: (arrived_at(budget), remaining),
            finished: false,
            unenforced: false,
        }
    }

    /// Name on the hop's line (when it has one) the trace the caller's `traceparent` names.
    /// A header that is not a valid `traceparent` names none.
    pub(crate) fn name_trace(&mut self, headers: &http::HeaderMap) {
        if let Some(line) = self.line.as_mut() {
            line.trace_id = headers
                .get("traceparent")
                .and_then(|v| TraceParent::parse(v.as_bytes()))
                .map(|parent| parent.trace_id);
        }
    }

    /// Give a hop opened with [`open_unlabelled`](Self::open_unlabelled) its own label
    /// `route`, for its metrics and its span's name. Does nothing to a hop whose arrival was
    /// counted already: its series are settled.
    pub(crate) fn relabel(&mut self, service: &Arc<str>, route: &str) {
        if let Some(line) = self.line.as_mut() {
            line.route = Arc::from(route);
        }
        #[cfg(feature = "metrics")]
        {
            if self.arrival.is_none() {
                return;
            }
            self.keys = metrics_names::KeyCache::lookup(service, route);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = service;
        if !self.span.is_disabled() {
            self.span.record(fields::ROUTE, route);
            // tracing-opentelemetry renames a span from `otel.name` only until its
            // OpenTelemetry span was started (by a child, or by propagation to a call the
            // handler made); after that the name is changed on the started span itself.
            #[cfg(any(feature = "otel", feature = "otlp"))]
            {
                use opentelemetry::trace::TraceContextExt as _;
                use tracing_opentelemetry::OpenTelemetrySpanExt as _;
                self.span.context().span().update_name(route.to_owned());
            }
        }
    }

    /// Note the status the caller is answered with (see [`AnswerStatus`]).
    pub(crate) fn answer_status(&mut self, status: AnswerStatus) {
        if !self.span.is_disabled() {
            match status {
                AnswerStatus::Http(code) => {
                    self.span.record(fields::HTTP_STATUS, i64::from(code));
                }
                AnswerStatus::Grpc(code) => {
                    self.span.record(fields::GRPC_STATUS, i64::from(code));
                }
            }
        }
        if let Some(line) = self.line.as_mut() {
            line.status = Some(status);
        }
    }

    /// The hop's span: run the handler inside it.
    ///
    /// See the [example](Self#examples).
    pub fn span(&self) -> &Span {
        &self.span
    }

    /// Close the hop with its terminal status.
    ///
    /// See the [example](Self#examples).
    pub fn finish(mut self, outcome: Outcome) {
        self.close(outcome, None, None);
    }

    /// Close the hop as refused before any work (rule [C3](crate::contract#c3)).
    ///
    /// See the [example](Self#examples).
    pub fn refuse(mut self, required: Duration) {
        self.close(Outcome::Refused, Some(required), None);
    }

    /// Record that the hop's work finished `overrun` after its deadline: work done for nobody.
    /// The hop's outcome stays what the caller saw (usually `expired`).
    ///
    /// See the [example](Self#examples).
    pub fn late_work(&self, overrun: Duration) {
        // `Span::record` looks the field up by name even on a disabled span: skip it.
        if !self.span.is_disabled() {
            self.span.record(fields::OVERRUN_MS, span_ms(overrun));
        }
        #[cfg(feature = "metrics")]
        metrics_names::record_late(&self.keys, overrun);
    }

    /// Record that enforcement was off for this hop (rule [C24](crate::contract#c24)) and what it would have done:
    /// the span's `deadline.unenforced` (with `deadline.required_ms` for a refusal), the
    /// hop's log line, and `hopbudget_unenforced_total`. The hop's outcome stays what
    /// happened.
    pub(crate) fn unenforced(&mut self, would: Would) {
        if std::mem::replace(&mut self.unenforced, true) {
            return;
        }
        if !self.span.is_disabled() {
            self.span.record(fields::UNENFORCED, would.as_str());
            if let Would::Refused(required) = would {
                self.span.record(fields::REQUIRED_MS, span_ms(required));
            }
        }
        if let Some(line) = self.line.as_mut() {
            line.would = Some(would);
        }
        #[cfg(feature = "metrics")]
        metrics_names::record_unenforced(&self.keys, would.as_str());
    }

    fn close(&mut self, outcome: Outcome, required: Option<Duration>, _overrun: Option<Duration>) {
        if self.finished {
            return;
        }
        self.finished = true;
        #[cfg(feature = "metrics")]
        if let Some(arrival) = self.arrival.take() {
            metrics_names::record_arrival(
                &self.keys,
                arrival.low_budget,
                arrival.remaining,
                arrival.source,
            );
        }
        if !self.span.is_disabled() {
            // The outcome last: a subscriber may take the hop as ended when it arrives.
            if let Some(required) = required {
                self.span.record(fields::REQUIRED_MS, span_ms(required));
            }
            self.span.record(fields::OUTCOME, outcome.as_str());
        }
        #[cfg(feature = "metrics")]
        metrics_names::record_end(&self.keys, outcome, self.opened.0.elapsed(), self.opened.1);
        if let Some(line) = self.line.take() {
            tracing::info!(
                target: LINE_TARGET,
                parent: &self.span,
                service = %line.service,
                route = %line.route,
                protocol = line.protocol.as_str(),
                outcome = outcome.as_str(),
                budget_ms = notice::millis(line.arrived),
                source = line.source.as_str(),
                used_ms = notice::millis(line.started.elapsed()),
                required_ms = required
                    .or(match line.would {
                        Some(Would::Refused(required)) => Some(required),
                        _ => None,
                    })
                    .map(notice::millis),
                unenforced = line.would.map(Would::as_str),
                http_status = match line.status {
                    Some(AnswerStatus::Http(code)) => Some(code),
                    _ => None,
                },
                grpc_status = match line.status {
                    Some(AnswerStatus::Grpc(code)) => Some(code),
                    _ => None,
                },
                trace_id = line.trace_id.map(|id| tracing::field::display(TraceHex(id))),
                "hop ended"
            );
        }
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

// Span fields are i64, not u64: tracing-opentelemetry turns u64 fields into strings, and
// OTLP's `intValue` is signed anyway.
fn span_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::HopPolicy;
    use crate::observe::labels::LayerMetrics;

    fn open(line: bool) -> Hop {
        let service: Arc<str> = "line-test".into();
        let layer = LayerMetrics::new(&service);
        let budget = RequestBudget::local(Duration::from_millis(100), HopPolicy::DEFAULT);
        let route = HopRoute::new(&layer, &service, "/r", Protocol::Http, Duration::ZERO);
        Hop::open(route.with_line(line), &budget)
    }

    /// #51: a hop keeps what its line needs only when the line is on and a subscriber would
    /// take it; the line's fields, when it is written, are checked in `tests/observe`.
    #[test]
    fn the_line_is_built_only_when_on_and_wanted() {
        assert!(open(true).line.is_none(), "no subscriber: nobody reads it");
        let warn_only = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_writer(std::io::sink)
            .finish();
        tracing::subscriber::with_default(warn_only, || {
            assert!(open(true).line.is_none(), "the subscriber leaves INFO out");
        });
        let info = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_writer(std::io::sink)
            .finish();
        tracing::subscriber::with_default(info, || {
            let hop = open(true);
            let line = hop.line.as_ref().expect("on and wanted");
            assert_eq!((&*line.service, &*line.route), ("line-test", "/r"));
            assert!(open(false).line.is_none(), "off");
        });
    }
}
