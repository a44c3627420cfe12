//! The trace link between a message's producer and its consumer.
//!
//! A consumed message is not a child of its producer's span: it may run hours later, after the
//! producing request ended. OpenTelemetry models that as a *link*, and so does this module. The
//! producer writes its trace position as a W3C `traceparent` header; the consumer's hop span
//! links to it. With the `otlp` feature the link is a real OpenTelemetry span link (through
//! `tracing-opentelemetry`) and the producer's `traceparent` comes from its current span;
//! without it, a `traceparent` that some other propagator wrote is still recorded, as an event
//! on the consumer's span.

use tracing::Span;

use super::HeaderCarrier;

/// The W3C Trace Context header a producer's trace position travels in.
///
/// With the `otlp` feature [`Stamper`](super::Stamper) writes it from the current span; a
/// producer whose tracing propagates W3C trace context some other way writes it itself. The
/// [`Gate`](super::Gate) links the consumer's hop span to it; an invalid value is ignored.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::collections::HashMap;
/// use hopbudget::queue::{Gate, HeaderCarrier, Processed, Stamper, TRACEPARENT};
/// use hopbudget::Profile;
///
/// let profile = Profile::default();
/// // Producer: the deadline, and the trace position its own propagator gives.
/// let mut message = HashMap::<String, String>::new();
/// Stamper::new(&profile).stamp(&mut message).unwrap();
/// message.set(TRACEPARENT, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
///
/// // Consumer: the message's hop span links to the producer's trace.
/// let admitted = Gate::new(&profile, "orders").check(&message).into_result().unwrap();
/// assert!(matches!(admitted.run(async {}).await, Processed::Completed(())));
/// # }
/// ```
pub const TRACEPARENT: &str = "traceparent";

/// A parsed `traceparent` (shared with the hop's log line, which names the trace).
pub(crate) use crate::observe::TraceParent;

/// Write the current span's trace position as `traceparent` (feature `otlp`; otherwise
/// nothing, and any `traceparent` already on the message stays).
pub(super) fn inject<C: HeaderCarrier + ?Sized>(headers: &mut C) {
    if let Some((trace_id, span_id, flags)) = crate::observe::current_position() {
        let parent = TraceParent {
            trace_id,
            span_id,
            flags,
        };
        headers.set(TRACEPARENT, &parent.format());
    }
}

/// Link the consumer's hop span to the producer's trace, if the message carries a valid
/// `traceparent`. An invalid one is ignored: it is not a deadline and must not stop the work.
pub(super) fn link<C: HeaderCarrier + ?Sized>(span: &Span, headers: &C) {
    if span.is_disabled() {
        return;
    }
    let Some(parent) = headers.get(TRACEPARENT).and_then(TraceParent::parse) else {
        return;
    };
    crate::observe::add_link(span, parent.trace_id, parent.span_id, parent.flags);
    tracing::debug!(
        parent: span,
        producer.trace_id = %format_args!("{:032x}", parent.trace_id),
        producer.span_id = %format_args!("{:016x}", parent.span_id),
        "message produced under this trace"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_w3c_traceparent_and_rejects_the_rest() {
        let v = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let p = TraceParent::parse(v.as_bytes()).unwrap();
        assert_eq!(p.format(), v);
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xx",
        ] {
            assert_eq!(TraceParent::parse(bad.as_bytes()), None, "{bad}");
        }
    }
}
