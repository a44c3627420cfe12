//! Reading the demo's trace files back, for the tests that check them.

use std::path::Path;

use hopbudget::observe::otlp::proto::{Span, Value};

/// Every span in an OTLP JSON file written by the demo.
pub(crate) fn spans(path: &Path) -> Vec<Span> {
    hopbudget::observe::otlp::read(path)
        .unwrap()
        .into_iter()
        .flat_map(|r| r.resource_spans)
        .flat_map(|r| r.scope_spans)
        .flat_map(|s| s.spans)
        .collect()
}

/// A span attribute.
pub(crate) fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
}

/// A string attribute.
pub(crate) fn text<'a>(span: &'a Span, key: &str) -> Option<&'a str> {
    match attr(span, key)? {
        Value::StringValue(s) => Some(s),
        _ => None,
    }
}

/// An integer attribute.
pub(crate) fn int(span: &Span, key: &str) -> Option<i64> {
    match attr(span, key)? {
        Value::IntValue(v) => Some(*v),
        _ => None,
    }
}

/// Lower-case hex of an id.
pub(crate) fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// The hop spans (those with a terminal status) of the measured requests (not the warm-up
/// call, request 0).
pub(crate) fn hops(spans: &[Span]) -> Vec<&Span> {
    spans
        .iter()
        .filter(|s| text(s, "deadline.outcome").is_some())
        .filter(|s| int(s, "demo.request_id") != Some(0))
        .collect()
}
