//! OpenTelemetry trace export to a file in OTLP JSON (feature `otlp`).
//!
//! Each export writes one `ExportTraceServiceRequest` as a single JSON line, in the JSON
//! form of the OTLP protobuf, as the OpenTelemetry Collector's `file` exporter writes it:
//! camelCase names, `resourceSpans` → `scopeSpans` → `spans`, hex `traceId`/`spanId`,
//! timestamps and `intValue`s as decimal strings, attributes as
//! `{"key": .., "value": {"stringValue" | "intValue" | ..: ..}}`. A collector's `otlpjsonfile`
//! receiver, `jq`, [`read`] or `hopbudget audit` can read it back.
//!
//! The `deadline.*` fields of a hop's span (see [`observe`](super)) arrive as span attributes
//! under the same names, through `tracing-opentelemetry`.
//!
//! One call sets up a process: [`install`] opens the file and sets a global `tracing`
//! subscriber that exports spans to it through [`default_filter`]: hopbudget's hop spans and
//! your own, without the transport crates' internals (one tonic call otherwise exports about
//! 180 `h2`/`hyper` spans; through the filter, the hops alone). [`install_with`] takes your own
//! filter. Keep the returned [`OtlpFile`] alive; dropping it flushes what is buffered. To
//! combine with other layers (logs to stderr), build an [`OtlpFile`] and add
//! [`OtlpFile::layer`] to your own subscriber, with
//! `.with_filter(otlp::default_filter())` if you want the same selection.
//!
//! [`read`] parses a file back; its types are re-exported in [`proto`], so a reader needs no
//! `opentelemetry-proto` dependency of its own.
//!
//! A whole process exporting its spans: `examples/observability.rs`.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use hopbudget::observe::{otlp::OtlpFile, Hop, HopLabels, Protocol};
//! use hopbudget::{HopPolicy, Outcome, RequestBudget};
//! use tracing_subscriber::layer::SubscriberExt;
//!
//! let path = std::env::temp_dir().join(format!("hopbudget-doc-{}.jsonl", std::process::id()));
//! let otlp = OtlpFile::create(&path, "tax")?;
//! let subscriber = tracing_subscriber::registry().with(otlp.layer());
//! tracing::subscriber::with_default(subscriber, || {
//!     let labels = HopLabels::new("tax", "/tax", Protocol::Http);
//!     let budget = RequestBudget::local(Duration::from_millis(120), HopPolicy::DEFAULT);
//!     Hop::start(&labels, &budget).finish(Outcome::Completed);
//! });
//! assert_eq!(otlp.path(), path.as_path());
//! otlp.flush()?;
//! otlp.shutdown()?;
//! let line = std::fs::read_to_string(&path)?;
//! assert!(line.contains(r#""key":"deadline.outcome","value":{"stringValue":"completed"}"#));
//!
//! // Read it back as OTLP types.
//! let requests = hopbudget::observe::otlp::read(&path)?;
//! let span = &requests[0].resource_spans[0].scope_spans[0].spans[0];
//! assert_eq!(span.name, "/tax");
//! # std::fs::remove_file(&path)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Appending to a file through an exporter you build, and the error for a file that cannot
//! be opened:
//!
//! ```
//! use hopbudget::observe::otlp::{FileSpanExporter, OtlpFile};
//!
//! let path = std::env::temp_dir().join(format!("hopbudget-doc-append-{}.jsonl", std::process::id()));
//! let exporter = FileSpanExporter::append(&path)?;
//! assert_eq!(exporter.path(), path.as_path());
//! // What one exported batch becomes: one `ExportTraceServiceRequest`, one line.
//! let request = exporter.to_request(Vec::new());
//! assert_eq!(request.resource_spans.iter().flat_map(|r| &r.scope_spans).flat_map(|s| &s.spans).count(), 0);
//! let otlp = OtlpFile::with_exporter(exporter, "tax");
//! let _sdk_provider = otlp.provider(); // for code that makes OpenTelemetry spans directly
//! otlp.shutdown()?;
//!
//! let missing = std::env::temp_dir().join("hopbudget-no-such-dir").join("t.jsonl");
//! let err = FileSpanExporter::create(&missing).unwrap_err();
//! assert!(err.to_string().contains("t.jsonl"));
//! # std::fs::remove_file(&path)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::{Path, PathBuf};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing_opentelemetry::OpenTelemetryLayer;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;

use self::proto::ExportTraceServiceRequest;

mod exporter;

pub use exporter::FileSpanExporter;

/// The OTLP types [`read`] returns (from `opentelemetry-proto`), re-exported so that code
/// reading a trace file needs no dependency of its own.
///
/// ```
/// use hopbudget::observe::otlp::proto::{AnyValue, ExportTraceServiceRequest, KeyValue, Value};
///
/// fn int_attribute(request: &ExportTraceServiceRequest, key: &str) -> Option<i64> {
///     let spans = request.resource_spans.iter().flat_map(|r| &r.scope_spans).flat_map(|s| &s.spans);
///     spans.flat_map(|s| &s.attributes).find_map(|KeyValue { key: k, value, .. }| match value {
///         Some(AnyValue { value: Some(Value::IntValue(v)) }) if k == key => Some(*v),
///         _ => None,
///     })
/// }
/// assert_eq!(int_attribute(&ExportTraceServiceRequest::default(), "deadline.remaining_ms"), None);
/// ```
pub mod proto {
    pub use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    pub use opentelemetry_proto::tonic::common::v1::any_value::Value;
    pub use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue};
    pub use opentelemetry_proto::tonic::resource::v1::Resource;
    pub use opentelemetry_proto::tonic::trace::v1::span::{Event, Link, SpanKind};
    pub use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
}

/// Crates whose spans describe their own machinery (HTTP/2 frames, connection pools, polls of
/// a service), not a hop: left out by [`default_filter`].
///
/// See the [example](default_filter#examples), which builds a filter of its own from them.
pub const TRANSPORT_TARGETS: &[&str] = &[
    "h2",
    "hyper",
    "hyper_util",
    "tonic",
    "tower",
    "reqwest",
    "tokio",
    "tokio_util",
    "mio",
    "want",
];

/// What went wrong setting up or flushing the OTLP file export.
///
/// See the [module example](crate::observe::otlp#examples).
#[derive(Debug, thiserror::Error)]
#[error("{context}")]
pub struct OtlpError {
    context: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl OtlpError {
    fn new(context: String, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self {
            context,
            source: Some(source.into()),
        }
    }
}

/// A tracer provider that exports spans to an OTLP JSON file in the background. Dropping it
/// flushes and closes the file.
///
/// See the [module example](crate::observe::otlp#examples).
#[derive(Debug)]
pub struct OtlpFile {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    path: PathBuf,
}

impl OtlpFile {
    /// Export spans of `service_name` (the resource's `service.name`) to `path`, replacing
    /// what it held. Spans are batched and written by a background thread.
    ///
    /// # Errors
    /// The file cannot be created; the error names it.
    ///
    /// See the [module example](crate::observe::otlp#examples).
    pub fn create(path: impl AsRef<Path>, service_name: &str) -> Result<Self, OtlpError> {
        let exporter = FileSpanExporter::create(path.as_ref())?;
        Ok(Self::with_exporter(exporter, service_name))
    }

    /// Like [`create`](Self::create), with an exporter you built (for example with
    /// [`FileSpanExporter::append`]).
    ///
    /// See the [module example](crate::observe::otlp#examples).
    pub fn with_exporter(exporter: FileSpanExporter, service_name: &str) -> Self {
        let path = exporter.path().to_owned();
        let provider = SdkTracerProvider::builder()
            .with_resource(
                Resource::builder()
                    .with_service_name(service_name.to_owned())
                    .build(),
            )
            .with_batch_exporter(exporter)
            .build();
        let tracer = provider.tracer("hopbudget");
        Self {
            provider,
            tracer,
            path,
        }
    }

    /// A `tracing` layer that turns spans into OpenTelemetry spans exported to the file.
    ///
    /// See the [module example](crate::observe::otlp#examples).
    pub fn layer<S>(&self) -> OpenTelemetryLayer<S, SdkTracer>
    where
        S: tracing::Subscriber + for<'span> LookupSpan<'span>,
    {
        tracing_opentelemetry::layer().with_tracer(self.tracer.clone())
    }

    /// The OpenTelemetry tracer provider, for code that creates OpenTelemetry spans directly.
    ///
    /// See the [module example](crate::observe::otlp#examples).
    pub fn provider(&self) -> &SdkTracerProvider {
        &self.provider
    }

    /// The file spans go to.
    ///
    /// See the [module example](crate::observe::otlp#examples).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Write every finished span to the file now.
    ///
    /// # Errors
    /// The export or the write failed; the error names the file.
    ///
    /// See the [module example](crate::observe::otlp#examples).
    pub fn flush(&self) -> Result<(), OtlpError> {
        self.provider.force_flush().map_err(|e| {
            OtlpError::new(
                format!("cannot flush OTLP trace file {}: {e}", self.path.display()),
                e,
            )
        })
    }

    /// Flush and close the file, reporting any error (dropping does the same silently).
    ///
    /// # Errors
    /// The export or the write failed; the error names the file.
    ///
    /// See the [module example](crate::observe::otlp#examples).
    pub fn shutdown(self) -> Result<(), OtlpError> {
        self.provider.shutdown().map_err(|e| {
            OtlpError::new(
                format!("cannot close OTLP trace file {}: {e}", self.path.display()),
                e,
            )
        })
    }
}

impl Drop for OtlpFile {
    fn drop(&mut self) {
        // Already shut down by `shutdown`, or the process is ending: either way nothing
        // useful can be done with an error here.
        let _ = self.provider.shutdown();
    }
}

/// Read back a file written by [`FileSpanExporter`] (or a collector's `file` exporter): one
/// `ExportTraceServiceRequest` per non-empty line.
///
/// # Errors
/// The file cannot be read, or a line is not an OTLP JSON trace request; the error names the
/// file and the line.
///
/// See the [module example](crate::observe::otlp#examples).
pub fn read(path: impl AsRef<Path>) -> Result<Vec<ExportTraceServiceRequest>, OtlpError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|e| {
        OtlpError::new(
            format!("cannot read OTLP trace file {}: {e}", path.display()),
            e,
        )
    })?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            serde_json::from_str(line).map_err(|e| {
                OtlpError::new(
                    format!(
                        "{}:{}: not an OTLP JSON trace request: {e}",
                        path.display(),
                        i + 1
                    ),
                    e,
                )
            })
        })
        .collect()
}

/// The spans [`install`] exports: every span at every level (hopbudget's `hop` spans, your
/// own, a `tower_http` trace layer you added), except those of the [`TRANSPORT_TARGETS`],
/// whose internals would otherwise outnumber the hops a hundred to one.
///
/// # Examples
///
/// ```
/// use tracing::Level;
/// use hopbudget::observe::otlp::default_filter;
///
/// let filter = default_filter();
/// assert!(filter.would_enable("hopbudget::observe", &Level::INFO));
/// assert!(filter.would_enable("my_service::orders", &Level::TRACE));
/// assert!(!filter.would_enable("h2::proto::connection", &Level::TRACE));
/// assert!(!filter.would_enable("hyper_util::client::legacy", &Level::DEBUG));
///
/// // Your own filter for `install_with`: the same, with one more crate left out.
/// use hopbudget::observe::otlp::TRANSPORT_TARGETS;
/// use tracing_subscriber::filter::{LevelFilter, Targets};
/// let mine = TRANSPORT_TARGETS
///     .iter()
///     .chain(&["sqlx"])
///     .fold(Targets::new().with_default(LevelFilter::TRACE), |f, t| f.with_target(*t, LevelFilter::OFF));
/// assert!(!mine.would_enable("sqlx::query", &Level::INFO));
/// ```
pub fn default_filter() -> Targets {
    TRANSPORT_TARGETS
        .iter()
        .fold(Targets::new().with_default(LevelFilter::TRACE), |f, t| {
            f.with_target(*t, LevelFilter::OFF)
        })
}

/// Export the spans of this process that [`default_filter`] selects to `path` as OTLP JSON:
/// open the file and set the global default subscriber to one that exports to it. Keep the
/// returned [`OtlpFile`] until the end of `main`; dropping it flushes.
///
/// ```no_run
/// let _traces = hopbudget::observe::otlp::install("traces.jsonl", "checkout")?;
/// // ... serve; every hop's span goes to traces.jsonl ...
/// # Ok::<(), hopbudget::observe::otlp::OtlpError>(())
/// ```
///
/// # Errors
/// The file cannot be created, or a global subscriber is already set.
pub fn install(path: impl AsRef<Path>, service_name: &str) -> Result<OtlpFile, OtlpError> {
    install_with(path, service_name, default_filter())
}

/// [`install`] with your own selection of spans, for example only hopbudget's and one crate's:
///
/// ```no_run
/// use tracing_subscriber::filter::{LevelFilter, Targets};
///
/// let filter = Targets::new()
///     .with_target("hopbudget", LevelFilter::TRACE)
///     .with_target("orders", LevelFilter::INFO);
/// let _traces = hopbudget::observe::otlp::install_with("traces.jsonl", "orders", filter)?;
/// # Ok::<(), hopbudget::observe::otlp::OtlpError>(())
/// ```
///
/// # Errors
/// The file cannot be created, or a global subscriber is already set.
pub fn install_with(
    path: impl AsRef<Path>,
    service_name: &str,
    filter: Targets,
) -> Result<OtlpFile, OtlpError> {
    let otlp = OtlpFile::create(path, service_name)?;
    let subscriber = tracing_subscriber::registry().with(otlp.layer().with_filter(filter));
    tracing::subscriber::set_global_default(subscriber).map_err(|e| {
        OtlpError::new(
            format!(
                "cannot export traces to {}: a global tracing subscriber is already set",
                otlp.path.display()
            ),
            e,
        )
    })?;
    Ok(otlp)
}
