//! The adoption profile (rule C15): header names, encodings, margins, thresholds, the edge
//! total, the maximum and the status codes, from one YAML file with documented defaults.
//!
//! A profile is checked whole at start-up. Every problem is reported with the file, the field
//! and the reason, and a service with a bad profile does not start. `profiles/default.yaml`
//! documents every field; `hopbudget profile check FILE` prints the resolved profile.
//!
//! The validated profile is [`hopbudget::Profile`](crate::Profile), at the crate root. This
//! module holds the YAML schema it is built from ([`ProfileSpec`] and its parts) and the
//! resolved pieces it hands out ([`RouteRule`], [`TrustedHosts`]). Its errors are
//! [`config::ConfigError`](crate::config::ConfigError)s.
//!
//! See the example on [`Profile`](crate::Profile#examples).
//!
//! Guide: *The adoption profile*, `docs/guide/profile.md` in the repository.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;
use serde::{Deserialize, Serialize};

use crate::admission::{AdmissionConfig, QueuePolicy};
use crate::budget::HopPolicy;
use crate::codec::{Carrier, InboundCarriers};
use crate::learned::{LearnConfig, LearnedThreshold};
use crate::status::{GrpcCode, GrpcStatusMap, HttpStatusMap};

pub(crate) mod shared;
mod trust;
pub(crate) mod validated;

pub use trust::{TrustedHosts, UnknownDestination};
// The one public path is `hopbudget::Profile`; inside the crate `crate::profile::Profile`
// still names it (and this module's doc links and tests use it).
#[allow(unused_imports)]
pub(crate) use validated::Profile;

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
    /// The kill switch (rule C24). `true` (the default): refuse what does not fit and end
    /// work at the deadline. `false`: observe only; budgets are still read, forwarded and
    /// recorded, hops record what enforcement would have done, and nothing is refused or cut
    /// for lack of time. Swap it into a running service with
    /// [`SharedProfile`](crate::SharedProfile).
    pub enforce: bool,
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
    /// What the server layers log of their hops (see [`LogSpec`]).
    pub log: LogSpec,
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
            enforce: true,
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
            log: LogSpec::default(),
        }
    }
}

/// What the server layers log, through `tracing`, of the hops they serve.
///
/// Two kinds of line, on two targets an operator can filter on:
///
/// - **`hopbudget::hop`**, with `hops: true`: one INFO line at every hop's end, with the
///   service, the route, the protocol, the outcome, the budget at arrival and its source,
///   and the time the hop took. Off by default: a line per request is a choice.
/// - **`hopbudget::notice`**: requests refused before work (C3) and requests that arrived
///   with no deadline (C8, `deadline received: none`), at INFO, so they show under the usual
///   `info` filter. At most `notices_per_s` lines a second for each of the two kinds in the
///   whole process; a line after a quiet spell says how many were left out. `0` turns them off.
///
/// ```
/// let p = hopbudget::Profile::from_yaml("log: {hops: true, notices_per_s: 5}", "inline.yaml").unwrap();
/// assert!(p.spec().log.hops);
/// assert_eq!(hopbudget::Profile::default().spec().log.notices_per_s, 1);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogSpec {
    /// One INFO line per hop end (target `hopbudget::hop`).
    pub hops: bool,
    /// Refusals and missing deadlines logged at INFO (target `hopbudget::notice`): at most
    /// this many lines a second of each kind; 0 logs none.
    pub notices_per_s: u32,
}

impl Default for LogSpec {
    fn default() -> Self {
        Self {
            hops: false,
            notices_per_s: 1,
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
///
/// See the [example](Profile#examples), whose `/quote` route learns.
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
    /// A call that names no host: `trusted` (default) or `untrusted`. See
    /// [`UnknownDestination`].
    pub unknown_destination: UnknownDestination,
}

impl Default for OutboundSpec {
    fn default() -> Self {
        Self {
            http: Carrier::RelativeMs,
            trusted_hosts: trust::default_patterns(),
            unknown_destination: UnknownDestination::default(),
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
    /// It is never added to the work's budget: a message inside it is refused, not run.
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

use crate::config::{ConfigError, Issue};

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
    ///
    /// See the [example](Profile#examples).
    pub fn threshold(&self) -> Duration {
        self.learned
            .as_ref()
            .map_or(self.min_budget, |l| l.threshold())
    }

    /// The refuse threshold as of `now`, for a caller that has read the clock already.
    ///
    /// See the [example](Profile#examples).
    pub fn threshold_at(&self, now: tokio::time::Instant) -> Duration {
        self.learned
            .as_ref()
            .map_or(self.min_budget, |l| l.threshold_at(now))
    }

    /// The route's learned threshold, if it learns. The server layers (every adapter of
    /// [`crate::hop`]) record each completed request's latency into it; other code may
    /// record too.
    ///
    /// See the [example](Profile#examples).
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
