//! The adoption profile (rule [C15](crate::contract#c15)): header names, encodings, margins,
//! thresholds, the edge total, the maximum and the status codes, from one YAML file with documented
//! defaults.
//!
//! A profile is checked whole at start-up. Every problem is reported with the file, the field
//! and the reason, and a service with a bad profile does not start. `profiles/default.yaml`
//! documents every field; `hopbudget profile check FILE` prints the resolved profile.
//!
//! [`Profile`] (also at the crate root, `hopbudget::Profile`) is the validated profile the
//! layers read. The YAML schema it is built from is [`ProfileSpec`], with one part per section
//! of the file, and each section has a file of its own here that holds its part of the schema
//! and its checks: `budgets` (the top-level numbers), `routes`, `admission`, `inbound`,
//! `outbound` (with `trust`), `headers`, `status`, `queue`, `log` and `sidecar`. [`RouteRule`] and
//! [`TrustedHosts`] are the resolved pieces a profile hands out. Its errors are
//! [`config::ConfigError`](crate::config::ConfigError)s.
//!
//! See the example on [`Profile`](Profile#examples).
//!
//! Guide: *The adoption profile*, `docs/guide/profile.md` in the repository.

use std::path::Path;
use std::time::Duration;

use http::HeaderName;

use crate::admission::AdmissionConfig;
use crate::budget::HopPolicy;
use crate::codec::{Carrier, InboundCarriers};
use crate::config::{ConfigError, Issue};
use crate::status::{GrpcStatusMap, HttpStatusMap};

mod admission;
mod budgets;
mod headers;
mod inbound;
mod issues;
mod log;
mod outbound;
mod queue;
mod routes;
pub(crate) mod shared;
mod sidecar;
mod spec;
mod status;
mod trust;

pub use admission::{AdmissionPolicySpec, AdmissionRouteSpec, AdmissionSpec};
pub use headers::HeaderSpec;
pub use log::LogSpec;
pub use outbound::OutboundSpec;
pub use queue::QueueSpec;
pub use routes::{LearnSpec, RouteMode, RouteRule, RouteSpec};
pub use sidecar::{SidecarSpec, Unmatched};
pub use spec::ProfileSpec;
pub use status::StatusSpec;
pub use trust::{TrustedHosts, UnknownDestination};

use budgets::Budgets;
use issues::Issues;

const KIND: &str = "profile";

/// A validated adoption profile, ready for layers to use.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use hopbudget::codec::Carrier;
/// use hopbudget::Profile;
/// use hopbudget::profile::{ProfileSpec, RouteMode, RouteSpec};
///
/// // From YAML (a file: `Profile::load("profiles/default.yaml")`); it names only what changes.
/// let profile = Profile::from_yaml(
///     "service: tax\n\
///      hop_margin_ms: 10\n\
///      routes:\n\
///        - {path: /tax, min_budget_ms: 200}\n\
///        - {path: /events/*, mode: stream}\n",
///     "tax.yaml",
/// )?;
/// assert_eq!(profile.service(), "tax");
/// assert_eq!(profile.policy().hop_margin, Duration::from_millis(10));
/// assert_eq!(profile.min_budget("/tax"), Duration::from_millis(200));
/// assert!(profile.is_stream("/events/orders"));
/// let rule = profile.route("/events/orders").expect("the prefix matches");
/// assert_eq!((rule.pattern(), rule.mode), ("/events/*", RouteMode::Stream));
/// assert!(rule.matches("/events/x") && !rule.matches("/tax"));
///
/// // A route that learns its threshold from its own latency (`learn:`, see `hopbudget::learned`).
/// let learning = Profile::from_yaml(
///     "routes: [{path: /quote, min_budget_ms: 40, learn: {quantile: p90, window_ms: 60000}}]",
///     "quote.yaml",
/// )?;
/// let quote = learning.route("/quote").expect("the route");
/// assert_eq!(quote.threshold(), Duration::from_millis(40)); // cold start: the static value
/// assert_eq!(quote.threshold_at(tokio::time::Instant::now()), Duration::from_millis(40));
/// quote.learned().expect("it learns").record(Duration::from_millis(120));
/// assert!(rule.learned().is_none());
///
/// // The documented defaults, readable one by one.
/// assert_eq!(profile.edge_total(), Duration::from_millis(1_000));
/// assert!(profile.max() >= profile.edge_total());
/// assert!(profile.stream_lifetime() > Duration::ZERO && profile.low_budget() > Duration::ZERO);
/// assert_eq!(profile.outbound_http().0, Carrier::RelativeMs);
/// assert_eq!(profile.http_status().expired, 504);
/// assert_eq!(profile.grpc_status().cancelled.as_i32(), 1);
/// assert!(profile.inbound().iter().any(|(c, _)| c == Carrier::GrpcTimeout));
/// assert_eq!(profile.queue().0, "deadline-epoch-ms");
/// assert!(profile.to_yaml().contains("hop_margin_ms: 10"));
///
/// // From code: edit the spec, then validate it; every problem names its field.
/// let mut spec = profile.spec().clone();
/// spec.routes.push(RouteSpec {
///     path: "/slow".into(),
///     min_budget_ms: Some(-1),
///     mode: RouteMode::Request,
///     learn: None,
/// });
/// let problems = Profile::from_spec(spec).unwrap_err();
/// assert_eq!(problems[0].field, "routes[2].min_budget_ms", "{problems:?}");
///
/// // The same profile under another service name.
/// assert_eq!(Profile::default().with_service("pricing").service(), "pricing");
/// # Ok::<(), hopbudget::config::ConfigError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Profile {
    spec: ProfileSpec,
    policy: HopPolicy,
    edge_total: Duration,
    max: Duration,
    stream_lifetime: Duration,
    low_budget: Duration,
    routes: Vec<RouteRule>,
    inbound: InboundCarriers,
    relative_header: HeaderName,
    epoch_header: HeaderName,
    queue_skew: Duration,
    admission: Option<AdmissionConfig>,
    trusted_hosts: TrustedHosts,
}

impl Default for Profile {
    fn default() -> Self {
        // The default spec is validated by a unit test; an error here cannot happen.
        Self::from_spec(ProfileSpec::default()).unwrap_or_else(|_| unreachable_default())
    }
}

#[cold]
fn unreachable_default() -> Profile {
    unreachable!("ProfileSpec::default() is valid (checked by profile::tests)")
}

impl Profile {
    /// Load and validate a profile file.
    ///
    /// See the [example](Self#examples).
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        Self::from_yaml(&crate::config::read_file(KIND, path)?, path)
    }

    /// Parse and validate profile text; `origin` names it in errors.
    ///
    /// See the [example](Self#examples).
    pub fn from_yaml(text: &str, origin: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let origin = origin.as_ref();
        let spec: ProfileSpec = crate::config::parse_yaml(KIND, text, origin)?;
        Self::from_spec(spec).map_err(|issues| ConfigError {
            kind: KIND,
            origin: origin.to_path_buf(),
            issues,
        })
    }

    /// Validate a spec, collecting every problem.
    ///
    /// See the [example](Self#examples).
    pub fn from_spec(spec: ProfileSpec) -> Result<Self, Vec<Issue>> {
        // Each section checks its own fields. The calls run in the order problems are reported
        // (the order `profile check` prints): first every number on its own, then the service
        // name, then the limits against `max_ms`, then names and codes section by section.
        let mut issues = Issues::default();
        let budgets = Budgets::check(&spec, &mut issues);
        let queue_skew = spec.queue.check_skew(&mut issues);
        let route_budgets =
            routes::min_budgets(&spec.routes, budgets.policy.refuse_below, &mut issues);
        spec::check_service(&spec.service, &mut issues);
        budgets.check_below_max(&route_budgets, &mut issues);
        let routes = routes::resolve(&spec.routes, route_budgets, &mut issues);
        let (relative_header, epoch_header) = spec.headers.check(&mut issues);
        spec.queue.check_headers(&mut issues);
        let inbound = inbound::check(&spec.inbound, &relative_header, &epoch_header, &mut issues);
        let trusted_hosts = spec.outbound.check(&mut issues);
        spec.status.check(&mut issues);
        spec.sidecar.check(&mut issues);
        let admission = spec.admission.as_ref().map(|a| {
            a.resolve(
                budgets.policy.refuse_below,
                budgets.max,
                &routes,
                &mut issues,
            )
        });
        issues.finish()?;
        Ok(Self {
            policy: budgets.policy,
            edge_total: budgets.edge_total,
            max: budgets.max,
            stream_lifetime: budgets.stream_lifetime,
            low_budget: budgets.low_budget,
            routes,
            inbound,
            relative_header,
            epoch_header,
            queue_skew,
            admission,
            trusted_hosts,
            spec,
        })
    }

    /// The spec this profile was built from (for printing the resolved profile).
    ///
    /// See the [example](Self#examples).
    pub fn spec(&self) -> &ProfileSpec {
        &self.spec
    }

    /// The resolved profile as YAML.
    ///
    /// See the [example](Self#examples).
    pub fn to_yaml(&self) -> String {
        serde_saphyr::to_string(&self.spec).unwrap_or_else(|e| format!("# cannot print: {e}\n"))
    }

    /// The service name.
    ///
    /// See the [example](Self#examples).
    pub fn service(&self) -> &str {
        &self.spec.service
    }

    /// Margin, transit allowance and refuse threshold.
    ///
    /// See the [example](Self#examples).
    pub fn policy(&self) -> HopPolicy {
        self.policy
    }

    /// Whether this profile enforces budgets (`enforce`, rule [C24](crate::contract#c24)). When
    /// `false` the layers refuse nothing and end nothing at the deadline; budgets are still
    /// forwarded and every hop is recorded, with what enforcement would have done.
    ///
    /// See the [example](crate::SharedProfile#examples).
    pub fn enforces(&self) -> bool {
        self.policy.enforce
    }

    /// Budget for requests without an inbound deadline (rule [C8](crate::contract#c8)).
    ///
    /// See the [example](Self#examples).
    pub fn edge_total(&self) -> Duration {
        self.edge_total
    }

    /// Inbound clamp (rule [C9](crate::contract#c9)).
    ///
    /// See the [example](Self#examples).
    pub fn max(&self) -> Duration {
        self.max
    }

    /// How long a stream may run after its first chunk (rule [C13](crate::contract#c13)).
    ///
    /// See the [example](Self#examples).
    pub fn stream_lifetime(&self) -> Duration {
        self.stream_lifetime
    }

    /// Arrivals below this budget count as "low budget".
    ///
    /// See the [example](Self#examples).
    pub fn low_budget(&self) -> Duration {
        self.low_budget
    }

    /// The carriers read on arrival, with their header names.
    ///
    /// See the [example](Self#examples).
    pub fn inbound(&self) -> &InboundCarriers {
        &self.inbound
    }

    /// The HTTP outbound carrier and its header name.
    ///
    /// See the [example](Self#examples).
    pub fn outbound_http(&self) -> (Carrier, &HeaderName) {
        match self.spec.outbound.http {
            Carrier::EpochMs => (Carrier::EpochMs, &self.epoch_header),
            _ => (Carrier::RelativeMs, &self.relative_header),
        }
    }

    /// The hosts outbound calls may send deadline headers to (rule [C19](crate::contract#c19),
    /// [S16](crate::contract#s16)).
    ///
    /// See the example on [`TrustedHosts`](crate::profile::TrustedHosts#examples).
    pub fn trusted_hosts(&self) -> &TrustedHosts {
        &self.trusted_hosts
    }

    /// HTTP status mapping.
    ///
    /// See the [example](Self#examples).
    pub fn http_status(&self) -> &HttpStatusMap {
        &self.spec.status.http
    }

    /// gRPC status mapping.
    ///
    /// See the [example](Self#examples).
    pub fn grpc_status(&self) -> &GrpcStatusMap {
        &self.spec.status.grpc
    }

    /// The queue boundary's settings: header, origin header, skew allowance.
    ///
    /// See the [example](Self#examples).
    pub fn queue(&self) -> (&str, &str, Duration) {
        (
            &self.spec.queue.header,
            &self.spec.queue.origin_header,
            self.queue_skew,
        )
    }

    /// Deadline-aware admission, if the profile has an `admission` section
    /// ([C21](crate::contract#c21)).
    ///
    /// See the [module example](crate::admission#example).
    pub fn admission(&self) -> Option<&AdmissionConfig> {
        self.admission.as_ref()
    }

    /// The first route rule matching `path`, if any.
    ///
    /// See the [example](Self#examples).
    pub fn route(&self, path: &str) -> Option<&RouteRule> {
        self.routes.iter().find(|r| r.matches(path))
    }

    /// The least budget a request to `path` needs to start (rule [C3](crate::contract#c3)): the
    /// route's [`threshold`](RouteRule::threshold), or the profile's `refuse_below_ms`.
    ///
    /// See the [example](Self#examples).
    pub fn min_budget(&self, path: &str) -> Duration {
        self.route(path)
            .map_or(self.policy.refuse_below, RouteRule::threshold)
    }

    /// Whether `path` is a streaming route (rule [C13](crate::contract#c13)).
    ///
    /// See the [example](Self#examples).
    pub fn is_stream(&self, path: &str) -> bool {
        self.route(path)
            .is_some_and(|r| r.mode == RouteMode::Stream)
    }

    /// Change the service name (handy when one process hosts several demo services).
    ///
    /// See the [example](Self#examples).
    pub fn with_service(mut self, service: impl Into<String>) -> Self {
        self.spec.service = service.into();
        self
    }
}

#[cfg(test)]
mod tests;
