//! Trace context on the wire (feature `otel`): W3C `traceparent` / `tracestate` (or whatever
//! propagator the application installed) carried in HTTP headers and gRPC metadata, so that a
//! hop's span is the child of its caller's span across processes and `hopbudget audit` can
//! rebuild each request's hop tree ([S13](crate::contract#s13)).
//!
//! Nothing here picks a format or a tracer: injection and extraction go through
//! `opentelemetry::global::get_text_map_propagator`, so they follow what the user set with
//! `opentelemetry::global::set_text_map_propagator` (for W3C trace context,
//! `opentelemetry_sdk::propagation::TraceContextPropagator`). With no propagator installed
//! the global one is a no-op: no header is written and no parent is set. Spans are reached
//! through `tracing-opentelemetry`, so the caller's span is the current `tracing` span and the
//! hop span is the `tracing` span of [`Hop`](super::Hop).
//!
//! hopbudget's layers use it: the HTTP client layer, reqwest's `BudgetMiddleware` and the gRPC
//! client layer call [`inject_current`] on the outgoing request's headers (gRPC metadata is
//! HTTP headers on the wire) next to the deadline, and server admission
//! ([`hop::HopConfig::admit`](crate::hop::HopConfig::admit)) calls [`set_parent`]
//! on the hop span with the incoming headers right after creating it, before it is first
//! entered. A custom adapter makes the same two calls.
//!
//! # Examples
//!
//! ```
//! use hopbudget::observe::propagation;
//! use opentelemetry_sdk::propagation::TraceContextPropagator;
//! use opentelemetry_sdk::trace::SdkTracerProvider;
//! use opentelemetry::trace::TracerProvider as _;
//! use tracing_subscriber::layer::SubscriberExt;
//!
//! opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
//! let provider = SdkTracerProvider::builder().build();
//! let subscriber = tracing_subscriber::registry()
//!     .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("doc")));
//! tracing::subscriber::with_default(subscriber, || {
//!     // Caller: inside its span, stamp the outgoing request.
//!     let mut headers = http::HeaderMap::new();
//!     tracing::info_span!("caller").in_scope(|| propagation::inject_current(&mut headers));
//!     assert!(headers.contains_key("traceparent"));
//!
//!     // Callee: its hop span continues the caller's trace.
//!     let hop = tracing::info_span!("hop");
//!     assert!(propagation::set_parent(&hop, &headers));
//! });
//! ```

use http::HeaderMap;
use http::header::{HeaderName, HeaderValue};
use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector};
use opentelemetry::trace::TraceContextExt as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Writes a propagator's fields into an [`http::HeaderMap`]. A field whose name or value is
/// not a valid header is skipped rather than allowed to fail the request.
///
/// See the [module example](crate::observe::propagation#examples).
#[derive(Debug)]
pub struct HeaderInjector<'a>(pub &'a mut HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

/// Reads a propagator's fields from an [`http::HeaderMap`]; values that are not visible
/// ASCII read as absent.
///
/// See the [module example](crate::observe::propagation#examples).
#[derive(Debug)]
pub struct HeaderExtractor<'a>(pub &'a HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

/// Write `cx`'s trace context into `headers` with the installed propagator.
///
/// See the [module example](crate::observe::propagation#examples).
pub fn inject_context(cx: &Context, headers: &mut HeaderMap) {
    opentelemetry::global::get_text_map_propagator(|p| {
        p.inject_context(cx, &mut HeaderInjector(headers));
    });
}

/// Write the trace context of `span` into `headers`.
///
/// See the [module example](crate::observe::propagation#examples).
pub fn inject_span(span: &tracing::Span, headers: &mut HeaderMap) {
    if span.is_disabled() {
        return;
    }
    inject_context(&span.context(), headers);
}

/// Write the trace context of the current `tracing` span into `headers`: the call a client
/// layer makes before sending.
///
/// See the [module example](crate::observe::propagation#examples).
pub fn inject_current(headers: &mut HeaderMap) {
    inject_span(&tracing::Span::current(), headers);
}

/// The context the caller sent in `headers`, read with the installed propagator.
///
/// See the [module example](crate::observe::propagation#examples).
pub fn extract(headers: &HeaderMap) -> Context {
    opentelemetry::global::get_text_map_propagator(|p| p.extract(&HeaderExtractor(headers)))
}

/// Make `span` (a hop span, not yet entered) the child of the caller's span whose context
/// arrived in `headers`. Returns whether a valid remote parent was found and set; without
/// one (no header, a malformed one, no propagator installed, no OpenTelemetry layer) the
/// span is left as it was.
///
/// See the [module example](crate::observe::propagation#examples).
pub fn set_parent(span: &tracing::Span, headers: &HeaderMap) -> bool {
    if span.is_disabled() {
        return false;
    }
    let cx = extract(headers);
    if !cx.span().span_context().is_valid() {
        return false;
    }
    span.set_parent(cx).is_ok()
}
