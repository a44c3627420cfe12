//! The validated profile: what the layers read (rule C15). The YAML schema it is built from
//! is in the parent module.

use super::*;

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
                enforce: spec.enforce,
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

    /// Whether this profile enforces budgets (`enforce`, rule C24). When `false` the layers
    /// refuse nothing and end nothing at the deadline; budgets are still forwarded and every
    /// hop is recorded, with what enforcement would have done.
    ///
    /// See the [example](crate::SharedProfile#examples).
    pub fn enforces(&self) -> bool {
        self.policy.enforce
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
