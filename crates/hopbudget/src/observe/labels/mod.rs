//! What a hop is labelled with: the protocol it speaks, its service and its route (a bounded
//! set, rule [C20](crate::contract#c20)), and the metric keys built once per label set. The
//! route labels themselves (what an adapter knows of a route, `other`, the bounded set of gRPC
//! methods) are in `route`; `hop` names them for adapters ([`hop::RouteLabel`](crate::hop::RouteLabel)).

use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "metrics")]
use super::metrics_names;

mod route;
pub(crate) use route::{MethodSet, is_method_path};
pub use route::{OTHER_ROUTE, RouteLabel};

/// The protocol a hop speaks, for the span's `rpc.system` / `network.protocol.name`.
///
/// See the [example](super::Hop#examples).
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
    ///
    /// See the [example](super::Hop#examples).
    pub const fn as_str(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Grpc => "grpc",
            Protocol::Queue => "queue",
        }
    }

    /// The OpenTelemetry span kind of a hop over this protocol (`otel.kind`): a hop serves a
    /// request (`server`) or consumes a message (`consumer`).
    ///
    /// See the [example](super::Hop#examples).
    pub const fn span_kind(self) -> &'static str {
        match self {
            Protocol::Http | Protocol::Grpc => "server",
            Protocol::Queue => "consumer",
        }
    }
}

/// Labels shared by every hop of one service and route.
///
/// Metric keys for a service and route are prepared once per process and shared, so a hop
/// records its metrics without building label strings (a thread-local lookup finds them).
/// Build one `HopLabels` per route and clone it for each request, or, when the route is a
/// borrowed per-request string such as a matched path, use [`for_route`](Self::for_route),
/// which reuses the strings of a route seen before.
///
/// See the [example](super::Hop#examples).
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
    pub(crate) low_budget: Duration,
    #[cfg(feature = "metrics")]
    // Set once, at construction, by `for_route`; `new` leaves it empty. (A `OnceLock` here
    // cost a `Once` initialisation per request in the layers.)
    pub(crate) keys: Option<metrics_names::Keys>,
}

impl HopLabels {
    /// Labels for `service` and `route` over `protocol`.
    ///
    /// See the [example](super::Hop#examples).
    pub fn new(
        service: impl Into<Arc<str>>,
        route: impl Into<Arc<str>>,
        protocol: Protocol,
    ) -> Self {
        let service = service.into();
        let route = route.into();
        Self {
            #[cfg(feature = "metrics")]
            keys: None,
            service,
            route,
            protocol,
            low_budget: DEFAULT_LOW_BUDGET,
        }
    }

    /// Labels for `service` and a `route` known only as a borrowed string per request (a
    /// matched path): with the `metrics` feature, a route seen before reuses the labels and
    /// metric keys already built for it instead of allocating. Same result as [`new`](Self::new).
    ///
    /// See the [example](super::Hop#examples).
    pub fn for_route(service: &Arc<str>, route: &str, protocol: Protocol) -> Self {
        #[cfg(feature = "metrics")]
        {
            let keys = metrics_names::KeyCache::lookup(service, route);
            Self {
                service: keys.service().clone(),
                route: keys.route().clone(),
                protocol,
                low_budget: DEFAULT_LOW_BUDGET,
                keys: Some(keys),
            }
        }
        #[cfg(not(feature = "metrics"))]
        Self::new(service.clone(), route, protocol)
    }

    /// Count arrivals with less than `low_budget` left as low-budget arrivals
    /// (`hopbudget_low_budget_arrivals_total`). Layers pass the profile's `low_budget_ms`;
    /// the default is 50 ms.
    ///
    /// See the [example](super::Hop#examples).
    pub fn with_low_budget(mut self, low_budget: Duration) -> Self {
        self.low_budget = low_budget;
        self
    }

    /// The low-budget threshold: arrivals with less than this left are counted as low.
    ///
    /// See the [example](super::Hop#examples).
    pub fn low_budget(&self) -> Duration {
        self.low_budget
    }
}

/// The default low-budget threshold (the profile's `low_budget_ms` default).
///
/// See the [example](super::Hop#examples).
pub const DEFAULT_LOW_BUDGET: Duration = Duration::from_millis(50);

/// What [`Hop::open`] reads of a hop's labels, borrowed.
pub(crate) struct HopRoute<'a> {
    pub(crate) service: &'a str,
    pub(crate) route: &'a str,
    pub(crate) protocol: Protocol,
    pub(crate) low_budget: Duration,
    pub(crate) line: bool,
    #[cfg(feature = "metrics")]
    pub(crate) keys: metrics_names::Keys,
}

/// One layer's metric series, per route, with the handles the recorder gave for them held
/// rather than looked up on every request (#51). Built with the layer, shared by every
/// request; its routes are a bounded set ([C20](crate::contract#c20)). Empty without the
/// `metrics` feature.
#[derive(Debug)]
pub(crate) struct LayerMetrics {
    #[cfg(feature = "metrics")]
    keys: metrics_names::LayerKeys,
}

impl LayerMetrics {
    /// The series of `service`, none resolved yet.
    pub(crate) fn new(service: &Arc<str>) -> Self {
        #[cfg(not(feature = "metrics"))]
        let _ = service;
        Self {
            #[cfg(feature = "metrics")]
            keys: metrics_names::LayerKeys::new(service),
        }
    }
}

impl<'a> HopRoute<'a> {
    /// The labels of `service` and `route` as `layer` records them: with the `metrics`
    /// feature, the layer's series for the route, made on its first request and kept.
    pub(crate) fn new(
        layer: &LayerMetrics,
        service: &'a Arc<str>,
        route: &'a str,
        protocol: Protocol,
        low_budget: Duration,
    ) -> Self {
        #[cfg(not(feature = "metrics"))]
        let _ = layer;
        Self {
            #[cfg(feature = "metrics")]
            keys: layer.keys.route(route),
            service,
            route,
            protocol,
            low_budget,
            line: false,
        }
    }

    /// The service and route as shared strings, for a hop's line: the ones the metric keys
    /// hold when there are keys, else new ones.
    pub(crate) fn shared_strings(&self) -> (Arc<str>, Arc<str>) {
        #[cfg(feature = "metrics")]
        if **self.keys.service() == *self.service && **self.keys.route() == *self.route {
            return (self.keys.service().clone(), self.keys.route().clone());
        }
        (Arc::from(self.service), Arc::from(self.route))
    }

    /// Write one line at the hop's end (the profile's `log.hops`).
    pub(crate) fn with_line(mut self, line: bool) -> Self {
        self.line = line;
        self
    }
}
