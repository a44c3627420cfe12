//! The demo's traces: the library's own span export (`hopbudget::observe::otlp`), one OTLP
//! JSON file per mode, `traces-<mode>.otlp.jsonl`, for `hopbudget audit` and any OTLP tool.
//!
//! Nothing here writes spans by hand. During a traced run every thread of the run's runtime
//! has a `tracing` subscriber whose only layer is [`OtlpFile::layer`] behind
//! [`otlp::default_filter`]: the spans the services make are exported as they close, and the
//! file is flushed when the run ends ([`RunTraces::finish`]). Each run has its own
//! subscriber, set per thread ([`enter_thread`], from the runtime's `on_thread_start`), so the
//! modes run one after another in one process, and demo runs in parallel test threads, each
//! write their own file; nothing is installed globally but the W3C propagator.
//!
//! What makes a span, and what its parent is:
//!
//! - `propagated`: hopbudget's server layers open the hop's span (`hop`, named by the
//!   route, with the `deadline.*` fields of C14) and make it the child of the span whose
//!   context arrived in the request's `traceparent` header (feature `otel`); hopbudget's client
//!   layers write that header from the calling hop's span. The demo adds nothing to either.
//! - `detached`, `timeouts` and the forgetful hop of `--forgetful` run without hopbudget's
//!   server layer, so the demo opens the hop's span itself ([`own_span`], the span a
//!   `tower_http::trace::TraceLayer` or a tonic interceptor gives a team), records on it what
//!   the hop knew in the library's field names (`deadline.source = none` when it knew no
//!   budget, its own budget when it made one up) and its terminal status. Trace context
//!   crosses the wire there too, through the plain OpenTelemetry propagator ([`inject`],
//!   [`inject_grpc`], [`own_span`]): W3C trace context is what a team has from its tracing
//!   setup whether or not it propagates deadlines, so each request is one trace in every mode.
//!
//! Every hop span also carries `demo.request_id` (the id in the report's timeline) and
//! `demo.traceparent`: the header exactly as it arrived, so a reader can check that the
//! span's parent is the span id that came over the wire.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use hopbudget::observe::otlp::{self, OtlpFile};
use hopbudget::observe::propagation;
use http::HeaderMap;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing::dispatcher::{DefaultGuard, Dispatch};
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;

use super::mode::Mode;
use super::topology::ServiceSpec;

/// The `tracing` target of the spans the demo opens itself ([`own_span`]).
pub const TARGET: &str = "hopbudget_demo";

/// The W3C trace context header.
pub const TRACEPARENT: &str = "traceparent";

/// The file a mode's traces go to, in `dir`.
pub fn path_for(dir: &Path, mode: Mode) -> PathBuf {
    dir.join(format!("traces-{}.otlp.jsonl", mode.as_str()))
}

/// One run's span export: an OTLP JSON file and the subscriber that writes to it.
#[derive(Debug)]
pub struct RunTraces {
    otlp: OtlpFile,
    dispatch: Dispatch,
}

impl RunTraces {
    /// Export the spans of one run to `path` (replacing what it held). Also installs the W3C
    /// trace context propagator, process-wide (idempotent), which both hopbudget's layers and
    /// the plain glue below go through.
    pub fn create(path: &Path) -> Result<Self, String> {
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        let otlp = OtlpFile::create(path, "hopbudget-demo").map_err(|e| e.to_string())?;
        let subscriber =
            tracing_subscriber::registry().with(otlp.layer().with_filter(otlp::default_filter()));
        Ok(Self {
            dispatch: Dispatch::new(subscriber),
            otlp,
        })
    }

    /// The run's subscriber, for [`enter_thread`] and `tracing::dispatcher::with_default`.
    pub fn dispatch(&self) -> &Dispatch {
        &self.dispatch
    }

    /// The file.
    pub fn path(&self) -> &Path {
        self.otlp.path()
    }

    /// Write every finished span and close the file. Call it after the run's runtime is shut
    /// down: spans still open then (work cut off at the drain limit) close as their tasks are
    /// dropped with the runtime, and are exported here.
    pub fn finish(self) -> Result<(), String> {
        self.otlp.shutdown().map_err(|e| e.to_string())
    }
}

thread_local! {
    static RUN_SUBSCRIBER: RefCell<Option<DefaultGuard>> = const { RefCell::new(None) };
}

/// Make `dispatch` this thread's default subscriber until [`leave_thread`] (for a runtime's
/// `on_thread_start`: worker and blocking threads alike).
pub fn enter_thread(dispatch: &Dispatch) {
    let guard = tracing::dispatcher::set_default(dispatch);
    RUN_SUBSCRIBER.with(|g| *g.borrow_mut() = Some(guard));
}

/// Undo [`enter_thread`] (for `on_thread_stop`).
pub fn leave_thread() {
    let guard = RUN_SUBSCRIBER.with(|g| g.borrow_mut().take());
    drop(guard);
}

/// The span of a hop whose service runs without hopbudget's server layer, the child of the
/// caller's span whose context arrived in `headers` (W3C `traceparent`, through the installed
/// OpenTelemetry propagator). The collector records `deadline.remaining_ms`,
/// `deadline.source` and `deadline.outcome` on it as the hop learns them.
pub fn own_span(spec: &ServiceSpec, route: &str, headers: &HeaderMap) -> Span {
    // Named like `tower_http`'s request span, not `hop`: `hopbudget-demo serve`'s log reads spans
    // named `hop` (the library's); these hops are logged by the collector instead.
    let span = tracing::info_span!(
        target: TARGET,
        "request",
        otel.name = route,
        otel.kind = "server",
        service.name = %spec.name,
        hop.protocol = spec.protocol.as_str(),
        deadline.remaining_ms = Empty,
        deadline.source = Empty,
        deadline.outcome = Empty,
    );
    propagation::set_parent(&span, headers);
    span
}

/// Whether `span` is one the demo opened itself ([`own_span`]), as opposed to hopbudget's.
pub fn is_own(span: &Span) -> bool {
    span.metadata().is_some_and(|m| m.target() == TARGET)
}

/// Mark a hop's span with the request id and the trace context as it arrived.
pub fn annotate(span: &Span, id: u64, headers: &HeaderMap) {
    if span.is_disabled() {
        return;
    }
    span.set_attribute("demo.request_id", i64::try_from(id).unwrap_or(i64::MAX));
    if let Some(tp) = headers.get(TRACEPARENT).and_then(|v| v.to_str().ok()) {
        span.set_attribute("demo.traceparent", tp.to_owned());
    }
}

/// Write the current span's trace context into an outbound request's `headers` with the
/// installed propagator: the glue a service without hopbudget's client layers has. It carries
/// trace context only, no deadline (`opentelemetry-http`'s injector does the same), so the
/// baseline modes stay without deadline propagation.
pub fn inject(headers: &mut HeaderMap) {
    propagation::inject_current(headers);
}

/// [`inject`] for a tonic request's metadata.
pub fn inject_grpc(metadata: &mut tonic::metadata::MetadataMap) {
    let mut headers = HeaderMap::new();
    inject(&mut headers);
    for (name, value) in &headers {
        if let (Ok(k), Ok(v)) = (
            tonic::metadata::AsciiMetadataKey::from_bytes(name.as_str().as_bytes()),
            tonic::metadata::AsciiMetadataValue::try_from(value.as_bytes()),
        ) {
            metadata.insert(k, v);
        }
    }
}
