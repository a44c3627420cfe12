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

/// A parsed `traceparent`: version 00, trace id, parent span id, flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TraceParent {
    pub(crate) trace_id: u128,
    pub(crate) span_id: u64,
    pub(crate) flags: u8,
}

impl TraceParent {
    /// Parse `00-<32 hex>-<16 hex>-<2 hex>`; all-zero ids are invalid (W3C Trace Context).
    pub(crate) fn parse(value: &[u8]) -> Option<Self> {
        let value = std::str::from_utf8(value).ok()?.trim();
        let mut parts = value.split('-');
        let (version, trace, span, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some()
            || version != "00"
            || trace.len() != 32
            || span.len() != 16
            || flags.len() != 2
        {
            return None;
        }
        let hex = |s: &str| s.bytes().all(|b| b.is_ascii_hexdigit());
        if !(hex(trace) && hex(span) && hex(flags)) {
            return None;
        }
        let parsed = Self {
            trace_id: u128::from_str_radix(trace, 16).ok()?,
            span_id: u64::from_str_radix(span, 16).ok()?,
            flags: u8::from_str_radix(flags, 16).ok()?,
        };
        (parsed.trace_id != 0 && parsed.span_id != 0).then_some(parsed)
    }

    pub(crate) fn format(&self) -> String {
        format!(
            "00-{:032x}-{:016x}-{:02x}",
            self.trace_id, self.span_id, self.flags
        )
    }
}
