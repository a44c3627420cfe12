//! The trace context the core's adapters read and write, without naming OpenTelemetry: the
//! hop span's remote parent (feature `otel`, through the installed propagator), and a
//! message's producer position and link (feature `otlp`, through `tracing-opentelemetry`).
//! Without those features each call does nothing.

use http::HeaderMap;
use tracing::Span;

/// Make `span` the child of the caller's span named in `headers` (feature `otel`; see
/// [`propagation::set_parent`](super::propagation::set_parent)).
pub(crate) fn follow_remote_parent(span: &Span, headers: &HeaderMap) {
    #[cfg(feature = "otel")]
    super::propagation::set_parent(span, headers);
    #[cfg(not(feature = "otel"))]
    let _ = (span, headers);
}

/// The current span's trace position (trace id, span id, flags), when it is a valid
/// OpenTelemetry span (feature `otlp`); `None` otherwise.
pub(crate) fn current_position() -> Option<(u128, u64, u8)> {
    #[cfg(feature = "otlp")]
    {
        use opentelemetry::trace::TraceContextExt;
        use tracing_opentelemetry::OpenTelemetrySpanExt;

        let cx = Span::current().context();
        let span = cx.span();
        let sc = span.span_context();
        sc.is_valid().then(|| {
            (
                u128::from_be_bytes(sc.trace_id().to_bytes()),
                u64::from_be_bytes(sc.span_id().to_bytes()),
                sc.trace_flags().to_u8(),
            )
        })
    }
    #[cfg(not(feature = "otlp"))]
    None
}

/// Link `span` to the remote position (trace id, span id, flags) as an OpenTelemetry span
/// link (feature `otlp`).
pub(crate) fn add_link(span: &Span, trace_id: u128, span_id: u64, flags: u8) {
    #[cfg(feature = "otlp")]
    {
        use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
        use tracing_opentelemetry::OpenTelemetrySpanExt;

        span.add_link(SpanContext::new(
            TraceId::from_bytes(trace_id.to_be_bytes()),
            SpanId::from_bytes(span_id.to_be_bytes()),
            TraceFlags::new(flags),
            true,
            TraceState::NONE,
        ));
    }
    #[cfg(not(feature = "otlp"))]
    let _ = (span, trace_id, span_id, flags);
}
