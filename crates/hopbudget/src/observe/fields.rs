//! The names of a hop span's fields, in one place: the layers record them, `hopbudget audit`
//! reads them back from OTLP traces, and a dashboard or a test queries them. One spelling, so
//! that the writer and the readers cannot drift apart.
//!
//! Every hop span (target `hopbudget`, name [`HOP_SPAN`]) declares all of [`HOP_FIELDS`]
//! when it opens; the `deadline.*` ones that depend on the end are recorded then.
//!
//! # Examples
//!
//! ```
//! use hopbudget::observe::fields;
//!
//! // Reading a hop out of a span's attributes, as `hopbudget audit` does.
//! let attributes = [(fields::OUTCOME, "refused"), (fields::SOURCE, "grpc-timeout")];
//! let outcome = attributes.iter().find(|(k, _)| *k == fields::OUTCOME).map(|(_, v)| *v);
//! assert_eq!(outcome, Some("refused"));
//! assert_eq!(fields::REMAINING_MS, "deadline.remaining_ms");
//! assert_eq!(fields::HOP_FIELDS.len(), 13);
//! ```

/// The name of every hop span.
///
/// See the [module example](self).
pub const HOP_SPAN: &str = "hop";
/// The route label, which OpenTelemetry exporters take as the span's name: a matched route
/// pattern, a gRPC method, a queue, or `other` ([C20](crate::contract#c20)).
///
/// See the [module example](self).
pub const ROUTE: &str = "otel.name";
/// The span kind for OpenTelemetry exporters: `server`, or `consumer` for a queue.
///
/// See the [module example](self).
pub const KIND: &str = "otel.kind";
/// The service's name.
///
/// See the [module example](self).
pub const SERVICE: &str = "service.name";
/// `http`, `grpc` or `queue`.
///
/// See the [module example](self).
pub const PROTOCOL: &str = "hop.protocol";
/// The budget at arrival, in ms.
///
/// See the [module example](self).
pub const REMAINING_MS: &str = "deadline.remaining_ms";
/// Where the budget came from: a carrier's name, or `fallback` ([C8](crate::contract#c8)).
///
/// See the [module example](self).
pub const SOURCE: &str = "deadline.source";
/// What the hop keeps back before forwarding (margin plus transit, [C2](crate::contract#c2)), in ms.
///
/// See the [module example](self).
pub const MARGIN_MS: &str = "deadline.margin_ms";
/// The outcome: `completed`, `refused`, `expired` or `cancelled`; recorded last, at the end.
///
/// See the [module example](self).
pub const OUTCOME: &str = "deadline.outcome";
/// What a refused hop needed, in ms ([C3](crate::contract#c3)); also what a hop let through with enforcement off
/// would have needed.
///
/// See the [module example](self).
pub const REQUIRED_MS: &str = "deadline.required_ms";
/// How long after its deadline the hop's work finished, in ms (late work, [C14](crate::contract#c14)).
///
/// See the [module example](self).
pub const OVERRUN_MS: &str = "deadline.overrun_ms";
/// With enforcement off ([C24](crate::contract#c24)), what enforcement would have done: `refused`, `expired` or
/// `malformed`.
///
/// See the [module example](self).
pub const UNENFORCED: &str = "deadline.unenforced";
/// The HTTP status the caller was answered with (OpenTelemetry's name).
///
/// See the [module example](self).
pub const HTTP_STATUS: &str = "http.response.status_code";
/// The gRPC status code the caller was answered with (OpenTelemetry's name).
///
/// See the [module example](self).
pub const GRPC_STATUS: &str = "rpc.grpc.status_code";

/// Every field a hop span declares, in the order it declares them.
///
/// See the [module example](self).
pub const HOP_FIELDS: [&str; 13] = [
    ROUTE,
    KIND,
    SERVICE,
    PROTOCOL,
    REMAINING_MS,
    SOURCE,
    MARGIN_MS,
    OUTCOME,
    REQUIRED_MS,
    OVERRUN_MS,
    UNENFORCED,
    HTTP_STATUS,
    GRPC_STATUS,
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::{Hop, HopLabels, Protocol};
    use crate::{budget::HopPolicy, budget::RequestBudget};

    /// The span the layers open is named and shaped as this module says: a field renamed on
    /// either side fails here, not silently in `hopbudget audit` or a dashboard.
    #[test]
    fn a_hop_span_declares_exactly_these_fields_in_this_order() {
        let subscriber = tracing_subscriber::registry();
        let (name, declared) = tracing::subscriber::with_default(subscriber, || {
            let budget =
                RequestBudget::local(std::time::Duration::from_secs(1), HopPolicy::DEFAULT);
            let hop = Hop::start(&HopLabels::new("svc", "/r", Protocol::Http), &budget);
            let meta = hop.span().metadata().expect("the span is enabled");
            let declared: Vec<&str> = meta.fields().iter().map(|f| f.name()).collect();
            (meta.name(), declared)
        });
        assert_eq!(name, HOP_SPAN);
        assert_eq!(declared, HOP_FIELDS);
    }
}
