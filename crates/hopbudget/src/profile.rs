//! The adoption profile (rule C15): header names, encodings, margins, thresholds, the edge
//! total, the maximum and the status codes, from one YAML file with documented defaults.
//!
//! A profile is checked whole at start-up. Every problem is reported with the file, the field
//! and the reason, and a service with a bad profile does not start. `profiles/default.yaml`
//! documents every field; `hopbudget profile check FILE` prints the resolved profile.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;
use serde::{Deserialize, Serialize};

use crate::admission::{AdmissionConfig, QueuePolicy};
use crate::codec::{Carrier, InboundCarriers};
use crate::context::HopPolicy;
use crate::learned::{LearnConfig, LearnedThreshold};
use crate::status::{GrpcCode, GrpcStatusMap, HttpStatusMap};

mod trust;

pub use trust::TrustedHosts;

/// The profile as written in YAML: plain values, before validation. Every field has a default,
/// so a profile file need only name what it changes.
///
/// See the [example](Profile#examples).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProfileSpec {
    /// The service's name, used in traces and metric labels.
    pub service: String,
    /// Budget given to a request that arrives without any deadline (rule C8).
    pub edge_total_ms: i64,
    /// Largest inbound budget accepted; larger ones are clamped (rule C9).
    pub max_ms: i64,
    /// Time a hop keeps back for itself before forwarding (rule C2).
    pub hop_margin_ms: i64,
    /// Time allowed for the request to travel to the next hop (rule C2).
    pub transit_allowance_ms: i64,
    /// Below this forward budget no downstream call starts, and below this remaining budget no
    /// handler starts unless its route says otherwise (rule C3).
    pub refuse_below_ms: i64,
    /// After the first chunk of a streaming response, how long the stream may run (rule C13).
    pub stream_lifetime_ms: i64,
    /// Arrivals with less than this much budget count as "low budget" in metrics.
    pub low_budget_ms: i64,
    /// Per-route settings; the first matching route wins.
    pub routes: Vec<RouteSpec>,
    /// Carriers read on arrival; the tightest wins.
    pub inbound: Vec<Carrier>,
    /// Carriers written on outbound calls.
    pub outbound: OutboundSpec,
    /// Header names of the HTTP carriers.
    pub headers: HeaderSpec,
    /// How terminal statuses are spelled on the wire.
    pub status: StatusSpec,
    /// The queue boundary's message headers.
    pub queue: QueueSpec,
    /// Deadline-aware admission (C21): absent means no admission layer is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<AdmissionSpec>,
}

impl Default for ProfileSpec {
    fn default() -> Self {
        Self {
            service: "unnamed".into(),
            edge_total_ms: 1_000,
            max_ms: 30_000,
            hop_margin_ms: 5,
            transit_allowance_ms: 1,
            refuse_below_ms: 10,
            stream_lifetime_ms: 300_000,
            low_budget_ms: 50,
            routes: Vec::new(),
            inbound: vec![
                Carrier::GrpcTimeout,
                Carrier::RelativeMs,
                Carrier::Connect,
                Carrier::Envoy,
            ],
            outbound: OutboundSpec::default(),
            headers: HeaderSpec::default(),
            status: StatusSpec::default(),
            queue: QueueSpec::default(),
            admission: None,
        }
    }
}

/// One route's settings.
///
/// See the [example](Profile#examples).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSpec {
    /// A request path (`/tax`, `/pkg.Service/Method`), or a prefix ending in `*`.
    pub path: String,
    /// The least remaining budget this route starts work with (its p50 or p99 cost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_budget_ms: Option<i64>,
    /// `request` (the default) or `stream`: the deadline covers time to first byte only.
    #[serde(default)]
    pub mode: RouteMode,
    /// Learn the refuse threshold from the route's own latency: the route then refuses below
    /// `max(min_budget_ms, learned)` (see [`crate::learned`]). Off when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learn: Option<LearnSpec>,
}

/// How a route learns its refuse threshold, as written in YAML.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LearnSpec {
    /// The quantile of recent latency to refuse below: `p50` (default; refuse work that would
    /// more likely than not miss), `p99` for strict routes, or any `pN` with 0 < N <= 100.
    pub quantile: String,
    /// The sliding window, ms (at least 100; it is cut into 8 slices).
    pub window_ms: i64,
    /// Below this many latencies in the window the static threshold applies alone.
    pub min_samples: i64,
}

impl Default for LearnSpec {
    fn default() -> Self {
        Self {
            quantile: "p50".into(),
            window_ms: 60_000,
            min_samples: 20,
        }
    }
}

/// The smallest learning window: 8 slices of at least 12.5 ms.
const MIN_LEARN_WINDOW_MS: i64 = 100;

impl LearnSpec {
    /// Validate into a [`LearnConfig`], reporting problems under `field`.
    fn resolve(&self, field: &str, issue: &mut dyn FnMut(&str, String)) -> LearnConfig {
        let quantile = self
            .quantile
            .strip_prefix('p')
            .and_then(|n| n.parse::<f64>().ok())
            .filter(|n| *n > 0.0 && *n <= 100.0)
            .map(|n| n / 100.0);
        if quantile.is_none() {
            issue(
                &format!("{field}.quantile"),
                format!(
                    "`{}` is not a quantile; write `p50`, `p99` or `pN` with 0 < N <= 100",
                    self.quantile
                ),
            );
        }
        if self.window_ms < MIN_LEARN_WINDOW_MS {
            issue(
                &format!("{field}.window_ms"),
                format!(
                    "must be at least {MIN_LEARN_WINDOW_MS} ms (got {})",
                    self.window_ms
                ),
            );
        }
        let min_samples = u32::try_from(self.min_samples).ok().filter(|n| *n > 0);
        if min_samples.is_none() {
            issue(
                &format!("{field}.min_samples"),
                format!(
                    "must be between 1 and {} (got {})",
                    u32::MAX,
                    self.min_samples
                ),
            );
        }
        LearnConfig {
            quantile: quantile.unwrap_or(0.5),
            window: Duration::from_millis(self.window_ms.max(MIN_LEARN_WINDOW_MS) as u64),
            min_samples: min_samples.unwrap_or(1),
        }
    }
}

/// How a route's response is bounded (rule C13).
///
/// See the [example](Profile#examples).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RouteMode {
    /// The deadline bounds the whole response.
    #[default]
    Request,
    /// The deadline bounds time to the first body chunk; then the stream lifetime applies.
    Stream,
}

/// Outbound encodings.
///
/// See the [example](Profile#examples).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutboundSpec {
    /// `relative-ms` (default, immune to clock skew) or `epoch-ms` (needs trusted clocks).
    pub http: Carrier,
    /// Hosts that may see deadline headers (rule C19, S16): `*`, the keywords `loopback`,
    /// `private`, `single-label`, a suffix `*.corp.internal`, or one host name or address.
    /// Listing hosts replaces the default (loopback, private addresses, names without a dot,
    /// `*.internal`, `*.local`, `*.svc`, `*.cluster.local`).
    pub trusted_hosts: Vec<String>,
}

impl Default for OutboundSpec {
    fn default() -> Self {
        Self {
            http: Carrier::RelativeMs,
            trusted_hosts: trust::default_patterns(),
        }
    }
}

/// Header names of the HTTP carriers; gRPC, Connect and Envoy names are fixed by their specs.
///
/// See the [example](Profile#examples).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HeaderSpec {
    /// Relative milliseconds.
    pub relative_ms: String,
    /// Absolute epoch milliseconds.
    pub epoch_ms: String,
}

impl Default for HeaderSpec {
    fn default() -> Self {
        Self {
            relative_ms: crate::codec::REQUEST_TIMEOUT_MS.into(),
            epoch_ms: crate::codec::REQUEST_DEADLINE.into(),
        }
    }
}

/// Status mapping.
///
/// See the [example](Profile#examples).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StatusSpec {
    /// HTTP status codes.
    pub http: HttpStatusMap,
    /// gRPC status codes.
    pub grpc: GrpcStatusMap,
}

/// Queue message headers.
///
/// See the [example](Profile#examples).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueSpec {
    /// Absolute deadline, epoch ms.
    pub header: String,
    /// The budget the producing request started with, ms (for accounting).
    pub origin_header: String,
    /// Clock skew tolerated between producer and consumer before a message counts as expired.
    pub skew_allowance_ms: i64,
}

impl Default for QueueSpec {
    fn default() -> Self {
        Self {
            header: crate::codec::QUEUE_DEADLINE_EPOCH_MS.into(),
            origin_header: crate::codec::QUEUE_ORIGIN_BUDGET_MS.into(),
            skew_allowance_ms: 50,
        }
    }
}

/// Deadline-aware admission (rule C21): how many requests do their work at once, how many
/// may wait, in which order, and what each route costs.
///
/// See the [module example](crate::admission#example).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdmissionSpec {
    /// Requests doing their work at once.
    pub limit: i64,
    /// Waiters held at most; beyond it a newcomer is refused at once.
    pub queue_bound: i64,
    /// `edf` (earliest deadline first) or `adaptive-lifo`.
    pub policy: AdmissionPolicySpec,
    /// For `adaptive-lifo`: how long the queue stays non-empty before the newest waiter is
    /// served first.
    pub lifo_after_ms: i64,
    /// Per-route cost: the budget a request must have left to be worth starting. A route not
    /// listed costs its `routes[].min_budget_ms`, else `refuse_below_ms`.
    pub routes: Vec<AdmissionRouteSpec>,
}

impl Default for AdmissionSpec {
    fn default() -> Self {
        Self {
            limit: 64,
            queue_bound: 1024,
            policy: AdmissionPolicySpec::Edf,
            lifo_after_ms: 100,
            routes: Vec::new(),
        }
    }
}

/// The order admission serves its waiters in.
///
/// See the [module example](crate::admission#example).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AdmissionPolicySpec {
    /// Earliest deadline first.
    #[default]
    Edf,
    /// Arrival order, newest first once queueing is sustained.
    AdaptiveLifo,
}

/// One route's admission cost.
///
/// See the [module example](crate::admission#example).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdmissionRouteSpec {
    /// A request path, or a prefix ending in `*`.
    pub path: String,
    /// The budget a request must have left, beyond its wait, to be worth starting.
    pub cost_ms: i64,
}

/// One problem with a profile.
pub use crate::config::Issue;

/// A rejected profile: every problem found, with the file it came from.
///
/// See the [example](Profile#examples), where `Profile::from_spec` returns the problems.
pub type ProfileError = crate::config::ConfigError;

const KIND: &str = "profile";

/// One route's resolved settings.
///
/// See the [example](Profile#examples).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteRule {
    pattern: String,
    /// The least budget this route starts with (the static threshold).
    pub min_budget: Duration,
    /// How the response is bounded.
    pub mode: RouteMode,
    /// The learned threshold, when the route has `learn:`; shared by clones of the profile.
    learned: Option<Arc<LearnedThreshold>>,
}

impl RouteRule {
    /// The refuse threshold now: `max(min_budget, learned)` for a learning route, else
    /// `min_budget` (rule C3).
    pub fn threshold(&self) -> Duration {
        self.learned
            .as_ref()
            .map_or(self.min_budget, |l| l.threshold())
    }

    /// The refuse threshold as of `now`, for a caller that has read the clock already.
    pub fn threshold_at(&self, now: tokio::time::Instant) -> Duration {
        self.learned
            .as_ref()
            .map_or(self.min_budget, |l| l.threshold_at(now))
    }

    /// The route's learned threshold, if it learns. The server layers (every adapter of
    /// [`crate::lifecycle`]) record each completed request's latency into it; other code may
    /// record too.
    pub fn learned(&self) -> Option<&LearnedThreshold> {
        self.learned.as_deref()
    }

    pub(crate) fn learned_shared(&self) -> Option<&Arc<LearnedThreshold>> {
        self.learned.as_ref()
    }

    /// Whether this rule applies to `path`.
    ///
    /// See the [example](Profile#examples).
    pub fn matches(&self, path: &str) -> bool {
        match self.pattern.strip_suffix('*') {
            Some(prefix) => path.starts_with(prefix),
            None => path == self.pattern,
        }
    }

    /// The path or prefix pattern.
    ///
    /// See the [example](Profile#examples).
    pub fn pattern(&self) -> &str {
        &self.pattern
    }
}

/// A validated adoption profile, ready for layers to use.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use hopbudget::codec::Carrier;
/// use hopbudget::profile::{Profile, ProfileSpec, RouteMode, RouteSpec};
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
/// # Ok::<(), hopbudget::profile::ProfileError>(())
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
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ProfileError> {
        let path = path.as_ref();
        Self::from_yaml(&crate::config::read_file(KIND, path)?, path)
    }

    /// Parse and validate profile text; `origin` names it in errors.
    ///
    /// See the [example](Self#examples).
    pub fn from_yaml(text: &str, origin: impl AsRef<Path>) -> Result<Self, ProfileError> {
        let origin = origin.as_ref();
        let spec: ProfileSpec = crate::config::parse_yaml(KIND, text, origin)?;
        Self::from_spec(spec).map_err(|issues| ProfileError {
            kind: KIND,
            origin: origin.to_path_buf(),
            issues,
        })
    }

    /// Validate a spec, collecting every problem.
    ///
    /// See the [example](Self#examples).
    pub fn from_spec(spec: ProfileSpec) -> Result<Self, Vec<Issue>> {
        let mut issues = Vec::new();
        let mut issue = |field: &str, reason: String| {
            issues.push(Issue {
                field: field.into(),
                reason,
            })
        };
        let mut ms = |field: &str, v: i64, positive: bool| -> Duration {
            if v < 0 {
                issue(field, format!("must not be negative (got {v})"));
                Duration::ZERO
            } else if positive && v == 0 {
                issue(field, "must be greater than zero".into());
                Duration::ZERO
            } else {
                Duration::from_millis(v as u64)
            }
        };
        let edge_total = ms("edge_total_ms", spec.edge_total_ms, true);
        let max = ms("max_ms", spec.max_ms, true);
        let hop_margin = ms("hop_margin_ms", spec.hop_margin_ms, false);
        let transit = ms("transit_allowance_ms", spec.transit_allowance_ms, false);
        let refuse_below = ms("refuse_below_ms", spec.refuse_below_ms, false);
        let stream_lifetime = ms("stream_lifetime_ms", spec.stream_lifetime_ms, true);
        let low_budget = ms("low_budget_ms", spec.low_budget_ms, false);
        let queue_skew = ms(
            "queue.skew_allowance_ms",
            spec.queue.skew_allowance_ms,
            false,
        );
        let mut route_budgets = Vec::new();
        for (i, r) in spec.routes.iter().enumerate() {
            route_budgets.push(
                r.min_budget_ms
                    .map(|v| ms(&format!("routes[{i}].min_budget_ms"), v, false))
                    .unwrap_or(refuse_below),
            );
        }

        if spec.service.trim().is_empty() {
            issue("service", "must not be empty".into());
        }
        if max > Duration::ZERO {
            if edge_total > max {
                issue(
                    "edge_total_ms",
                    format!(
                        "edge total {} ms is above the maximum {} ms",
                        edge_total.as_millis(),
                        max.as_millis()
                    ),
                );
            }
            if refuse_below > max {
                issue(
                    "refuse_below_ms",
                    format!(
                        "threshold {} ms is above the maximum {} ms",
                        refuse_below.as_millis(),
                        max.as_millis()
                    ),
                );
            }
            if hop_margin + transit >= max {
                issue(
                    "hop_margin_ms",
                    "margin plus transit allowance leaves no budget below the maximum".into(),
                );
            }
            for (i, b) in route_budgets.iter().enumerate() {
                if *b > max {
                    issue(
                        &format!("routes[{i}].min_budget_ms"),
                        format!(
                            "minimum budget {} ms is above the maximum {} ms",
                            b.as_millis(),
                            max.as_millis()
                        ),
                    );
                }
            }
        }

        let mut routes = Vec::with_capacity(spec.routes.len());
        for (i, (r, min_budget)) in spec.routes.iter().zip(route_budgets).enumerate() {
            if !r.path.starts_with('/') {
                issue(
                    &format!("routes[{i}].path"),
                    format!("`{}` must start with `/`", r.path),
                );
            }
            if spec.routes[..i].iter().any(|o| o.path == r.path) {
                issue(
                    &format!("routes[{i}].path"),
                    format!("`{}` is listed twice", r.path),
                );
            }
            let learned = r.learn.as_ref().map(|l| {
                let config = l.resolve(&format!("routes[{i}].learn"), &mut issue);
                Arc::new(LearnedThreshold::new(min_budget, config))
            });
            routes.push(RouteRule {
                pattern: r.path.clone(),
                min_budget,
                mode: r.mode,
                learned,
            });
        }

        let header = |field: &str, name: &str, issue: &mut dyn FnMut(&str, String)| {
            HeaderName::from_bytes(name.as_bytes()).unwrap_or_else(|_| {
                issue(field, format!("`{name}` is not a valid HTTP header name"));
                HeaderName::from_static(crate::codec::REQUEST_TIMEOUT_MS)
            })
        };
        let relative_header = header("headers.relative_ms", &spec.headers.relative_ms, &mut issue);
        let epoch_header = header("headers.epoch_ms", &spec.headers.epoch_ms, &mut issue);
        header("queue.header", &spec.queue.header, &mut issue);
        header("queue.origin_header", &spec.queue.origin_header, &mut issue);

        for (i, c) in spec.inbound.iter().enumerate() {
            if spec.inbound[..i].contains(c) {
                issue(&format!("inbound[{i}]"), format!("`{c}` is listed twice"));
            }
            if *c == Carrier::Queue {
                issue(
                    &format!("inbound[{i}]"),
                    "`queue` is read by the queue boundary (see `queue:`), not by servers".into(),
                );
            }
        }
        if !matches!(spec.outbound.http, Carrier::RelativeMs | Carrier::EpochMs) {
            issue(
                "outbound.http",
                format!(
                    "`{}` is not an HTTP encoding; use `relative-ms` or `epoch-ms`",
                    spec.outbound.http
                ),
            );
        }

        let trusted_hosts =
            TrustedHosts::parse(&spec.outbound.trusted_hosts).unwrap_or_else(|(i, reason)| {
                issue(&format!("outbound.trusted_hosts[{i}]"), reason);
                TrustedHosts::none()
            });

        let http = &spec.status.http;
        for (field, code) in [
            ("status.http.refused", http.refused),
            ("status.http.expired", http.expired),
            ("status.http.cancelled", http.cancelled),
            ("status.http.malformed", http.malformed),
        ] {
            if !(400..=599).contains(&code) {
                issue(
                    field,
                    format!("{code} is not an HTTP error status (400-599)"),
                );
            }
        }
        for (field, code) in [
            ("status.http.refused", http.refused),
            ("status.http.expired", http.expired),
            ("status.http.cancelled", http.cancelled),
        ] {
            if code == 429 {
                issue(field, "429 means quota, not time (rule C10)".into());
            }
        }
        if http.expired == http.cancelled {
            issue(
                "status.http.cancelled",
                "must differ from `expired`: expiry is not cancellation (rules C4, C5)".into(),
            );
        }
        if http.refused == http.cancelled {
            issue(
                "status.http.refused",
                "must differ from `cancelled` (rule C10)".into(),
            );
        }
        let grpc = &spec.status.grpc;
        for (field, code) in [
            ("status.grpc.refused", grpc.refused),
            ("status.grpc.expired", grpc.expired),
            ("status.grpc.cancelled", grpc.cancelled),
            ("status.grpc.malformed", grpc.malformed),
        ] {
            if code == GrpcCode::ResourceExhausted {
                issue(
                    field,
                    "RESOURCE_EXHAUSTED means quota, not time (rule C10)".into(),
                );
            }
            if code == GrpcCode::Ok {
                issue(field, "OK is not an error status".into());
            }
        }
        if grpc.expired == grpc.cancelled {
            issue(
                "status.grpc.cancelled",
                "must differ from `expired`: expiry is not cancellation (rules C4, C5)".into(),
            );
        }

        let admission = spec.admission.as_ref().map(|a| {
            let count =
                |field: &str, v: i64, positive: bool, issue: &mut dyn FnMut(&str, String)| {
                    if v < 0 {
                        issue(field, format!("must not be negative (got {v})"));
                    } else if positive && v == 0 {
                        issue(field, "must be greater than zero".into());
                    }
                    usize::try_from(v).unwrap_or(0)
                };
            let limit = count("admission.limit", a.limit, true, &mut issue);
            let bound = count("admission.queue_bound", a.queue_bound, false, &mut issue);
            let lifo_after = if a.lifo_after_ms < 0 {
                issue(
                    "admission.lifo_after_ms",
                    format!("must not be negative (got {})", a.lifo_after_ms),
                );
                Duration::ZERO
            } else {
                Duration::from_millis(a.lifo_after_ms as u64)
            };
            let policy = match a.policy {
                AdmissionPolicySpec::Edf => QueuePolicy::EarliestDeadlineFirst,
                AdmissionPolicySpec::AdaptiveLifo => {
                    QueuePolicy::AdaptiveLifo { after: lifo_after }
                }
            };
            let mut config = AdmissionConfig::new(limit)
                .with_queue_bound(bound)
                .with_policy(policy)
                .with_cost(refuse_below);
            for (i, r) in a.routes.iter().enumerate() {
                let field = format!("admission.routes[{i}]");
                if !r.path.starts_with('/') {
                    issue(
                        &format!("{field}.path"),
                        format!("`{}` must start with `/`", r.path),
                    );
                }
                if a.routes[..i].iter().any(|o| o.path == r.path) {
                    issue(
                        &format!("{field}.path"),
                        format!("`{}` is listed twice", r.path),
                    );
                }
                let cost = if r.cost_ms < 0 {
                    issue(
                        &format!("{field}.cost_ms"),
                        format!("must not be negative (got {})", r.cost_ms),
                    );
                    Duration::ZERO
                } else {
                    Duration::from_millis(r.cost_ms as u64)
                };
                if max > Duration::ZERO && cost > max {
                    issue(
                        &format!("{field}.cost_ms"),
                        format!(
                            "cost {} ms is above the maximum {} ms: no request could ever start",
                            cost.as_millis(),
                            max.as_millis()
                        ),
                    );
                }
                config = config.with_route(r.path.clone(), cost);
            }
            // A route the admission section does not name costs its minimum budget.
            for r in &routes {
                config = config.with_route(r.pattern.clone(), r.min_budget);
            }
            config
        });

        if !issues.is_empty() {
            return Err(issues);
        }
        let inbound = InboundCarriers::with_names(spec.inbound.iter().map(|c| {
            let name = match c {
                Carrier::RelativeMs => relative_header.clone(),
                Carrier::EpochMs => epoch_header.clone(),
                other => HeaderName::from_static(other.default_header()),
            };
            (*c, name)
        }));
        Ok(Self {
            policy: HopPolicy {
                hop_margin,
                transit_allowance: transit,
                refuse_below,
            },
            edge_total,
            max,
            stream_lifetime,
            low_budget,
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

    /// Budget for requests without an inbound deadline (rule C8).
    ///
    /// See the [example](Self#examples).
    pub fn edge_total(&self) -> Duration {
        self.edge_total
    }

    /// Inbound clamp (rule C9).
    ///
    /// See the [example](Self#examples).
    pub fn max(&self) -> Duration {
        self.max
    }

    /// How long a stream may run after its first chunk (rule C13).
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

    /// The hosts outbound calls may send deadline headers to (rule C19, S16).
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

    /// Deadline-aware admission, if the profile has an `admission` section (C21).
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

    /// The least budget a request to `path` needs to start (rule C3): the route's
    /// [`threshold`](RouteRule::threshold), or the profile's `refuse_below_ms`.
    ///
    /// See the [example](Self#examples).
    pub fn min_budget(&self, path: &str) -> Duration {
        self.route(path)
            .map_or(self.policy.refuse_below, RouteRule::threshold)
    }

    /// Whether `path` is a streaming route (rule C13).
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
mod tests {
    use super::*;

    fn errors(yaml: &str) -> Vec<(String, String)> {
        match Profile::from_yaml(yaml, "test.yaml") {
            Ok(_) => Vec::new(),
            Err(e) => e.issues.into_iter().map(|i| (i.field, i.reason)).collect(),
        }
    }

    #[test]
    fn the_default_spec_is_valid_and_matches_the_contract() {
        let p = Profile::from_spec(ProfileSpec::default()).expect("default is valid");
        assert_eq!(p.edge_total(), Duration::from_secs(1));
        assert_eq!(p.policy(), HopPolicy::DEFAULT);
        assert_eq!(p.outbound_http().0, Carrier::RelativeMs);
        assert_eq!(p.http_status().expired, 504);
    }

    #[test]
    fn the_shipped_default_file_equals_the_built_in_defaults() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../profiles/default.yaml");
        let p = Profile::load(path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            p.spec(),
            &ProfileSpec {
                service: p.service().into(),
                ..ProfileSpec::default()
            }
        );
    }

    #[test]
    fn a_bad_trusted_host_pattern_is_named() {
        let errs = errors("outbound:\n  trusted_hosts: [loopback, 'a*b']\n");
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].0, "outbound.trusted_hosts[1]");
        assert!(errs[0].1.contains("`a*b`"), "{errs:?}");
        let p = Profile::from_yaml("outbound: {trusted_hosts: ['*.corp']}", "t").unwrap();
        assert!(p.trusted_hosts().allows("a.corp"));
        assert!(
            !p.trusted_hosts().allows("127.0.0.1"),
            "a list replaces the default"
        );
    }

    #[test]
    fn empty_text_means_all_defaults() {
        assert!(errors("").is_empty());
        assert!(errors("# only a comment\n").is_empty());
    }

    #[test]
    fn every_semantic_problem_is_reported_with_its_field() {
        let errs = errors(
            "service: ''\nhop_margin_ms: -5\nmax_ms: 1000\nrefuse_below_ms: 2000\n\
             status:\n  http:\n    expired: 429\n  grpc:\n    expired: RESOURCE_EXHAUSTED\n",
        );
        let fields: Vec<&str> = errs.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            [
                "hop_margin_ms",
                "service",
                "refuse_below_ms",
                "status.http.expired",
                "status.grpc.expired"
            ],
            "{errs:?}"
        );
        assert!(errs[0].1.contains("negative"));
        assert!(errs[2].1.contains("above the maximum"));
        assert!(errs[3].1.contains("429"));
    }

    #[test]
    fn unknown_fields_and_bad_types_name_the_path() {
        let errs = errors("hop_margn_ms: 5\n");
        assert_eq!(errs[0].0, "hop_margn_ms");
        assert!(
            errs[0].1.contains("unknown field `hop_margn_ms`"),
            "{errs:?}"
        );
        let errs = errors("status:\n  http:\n    expired: soon\n");
        assert_eq!(errs[0].0, "status.http.expired", "{errs:?}");
        let errs = errors("inbound: [grpc-timeout, smoke-signal]\n");
        assert_eq!(errs[0].0, "inbound[1]", "{errs:?}");
    }

    #[test]
    fn routes_resolve_by_exact_path_or_prefix() {
        let p = Profile::from_yaml(
            "routes:\n  - path: /tax\n    min_budget_ms: 200\n  - path: /events/*\n    mode: stream\n",
            "t.yaml",
        )
        .unwrap();
        assert_eq!(p.min_budget("/tax"), Duration::from_millis(200));
        assert_eq!(p.min_budget("/other"), Duration::from_millis(10));
        assert!(p.is_stream("/events/orders"));
        assert!(!p.is_stream("/tax"));
    }

    #[test]
    fn admission_resolves_limit_policy_and_route_costs() {
        assert!(
            Profile::default().admission().is_none(),
            "absent by default"
        );
        let p = Profile::from_yaml(
            "routes:\n  - path: /tax\n    min_budget_ms: 200\n\
             admission:\n  limit: 8\n  queue_bound: 32\n  policy: adaptive-lifo\n  \
             lifo_after_ms: 40\n  routes:\n    - path: /quote/*\n      cost_ms: 25\n",
            "t.yaml",
        )
        .unwrap();
        let a = p.admission().expect("configured");
        assert_eq!((a.limit(), a.queue_bound()), (8, 32));
        assert_eq!(
            a.policy(),
            QueuePolicy::AdaptiveLifo {
                after: Duration::from_millis(40)
            }
        );
        assert_eq!(a.cost_for(Some("/quote/eu")), Duration::from_millis(25));
        // Not named by admission: the route's min_budget_ms, else refuse_below_ms.
        assert_eq!(a.cost_for(Some("/tax")), Duration::from_millis(200));
        assert_eq!(a.cost_for(Some("/other")), Duration::from_millis(10));
        let defaults = Profile::from_yaml("admission: {}\n", "t.yaml").unwrap();
        let d = defaults.admission().unwrap();
        assert_eq!((d.limit(), d.queue_bound()), (64, 1024));
        assert_eq!(d.policy(), QueuePolicy::EarliestDeadlineFirst);
    }

    #[test]
    fn admission_problems_name_their_field() {
        let errs = errors(
            "max_ms: 1000\nadmission:\n  limit: 0\n  queue_bound: -1\n  lifo_after_ms: -3\n  \
             routes:\n    - path: tax\n      cost_ms: 5000\n    - path: tax\n      cost_ms: -1\n",
        );
        let fields: Vec<&str> = errs.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            [
                "admission.limit",
                "admission.queue_bound",
                "admission.lifo_after_ms",
                "admission.routes[0].path",
                "admission.routes[0].cost_ms",
                "admission.routes[1].path",
                "admission.routes[1].path",
                "admission.routes[1].cost_ms",
            ],
            "{errs:?}"
        );
        assert!(errs[0].1.contains("greater than zero"));
        assert!(errs[4].1.contains("above the maximum"));
        assert!(errs[6].1.contains("listed twice"));
        let errs = errors("admission:\n  policy: random\n");
        assert_eq!(errs[0].0, "admission.policy", "{errs:?}");
        let errs = errors("admission:\n  limt: 4\n");
        assert!(errs[0].1.contains("unknown field `limt`"), "{errs:?}");
    }

    #[test]
    fn display_names_file_field_and_reason() {
        let err = Profile::from_yaml("max_ms: -1\n", "profiles/bad.yaml").unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("profiles/bad.yaml: field `max_ms`: must not be negative (got -1)"),
            "{text}"
        );
    }

    #[test]
    fn learn_is_off_unless_a_route_asks_and_validated_field_by_field() {
        let p = Profile::from_yaml(
            concat!(
                "routes:\n",
                "  - path: /tax\n    min_budget_ms: 40\n    learn: {}\n",
                "  - path: /pay\n    learn: { quantile: p99, window_ms: 10000, min_samples: 5 }\n",
                "  - path: /other\n",
            ),
            "t.yaml",
        )
        .unwrap();
        let tax = p.route("/tax").unwrap().learned().unwrap();
        assert_eq!(tax.config(), &LearnConfig::P50);
        assert_eq!(tax.static_min(), Duration::from_millis(40));
        let pay = p.route("/pay").unwrap().learned().unwrap().config();
        assert_eq!(
            (pay.quantile, pay.window, pay.min_samples),
            (0.99, Duration::from_secs(10), 5)
        );
        assert!(p.route("/other").unwrap().learned().is_none());
        // Cold start: the static threshold.
        assert_eq!(p.min_budget("/tax"), Duration::from_millis(40));

        let errs = errors("routes:\n  - path: /c\n    learn: { windw_ms: 5 }\n");
        assert_eq!(errs[0].0, "routes[0].learn.windw_ms", "{errs:?}");
        let errs = errors(concat!(
            "routes:\n",
            "  - path: /a\n    learn: { quantile: median, window_ms: 50, min_samples: 0 }\n",
            "  - path: /b\n    learn: { quantile: p150 }\n",
        ));
        let fields: Vec<&str> = errs.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            [
                "routes[0].learn.quantile",
                "routes[0].learn.window_ms",
                "routes[0].learn.min_samples",
                "routes[1].learn.quantile",
            ],
            "{errs:?}"
        );
        assert!(errs[0].1.contains("`median` is not a quantile"), "{errs:?}");
        assert!(errs[1].1.contains("at least 100 ms"), "{errs:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_learning_route_refuses_below_what_it_learned_and_clones_share_it() {
        let p = Profile::from_yaml(
            "routes:\n  - path: /tax\n    min_budget_ms: 40\n    learn: { window_ms: 8000 }\n",
            "t.yaml",
        )
        .unwrap();
        let copy = p.clone();
        for _ in 0..50 {
            copy.route("/tax")
                .unwrap()
                .learned()
                .unwrap()
                .record(Duration::from_millis(200));
        }
        tokio::time::advance(Duration::from_secs(1)).await;
        let t = p.min_budget("/tax");
        assert!(
            t >= Duration::from_millis(200) && t < Duration::from_millis(230),
            "{t:?}"
        );
    }
}
