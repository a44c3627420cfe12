//! The profile's `admission:` section (rule [C21](crate::contract#c21)): its part of the YAML
//! schema and the checks that resolve it into an [`AdmissionConfig`]. Only the profile's side,
//! like every other section here; admission itself (the layer, the semaphore, their queue) is
//! [`crate::admission`].
//!
//! The import of `admission::{AdmissionConfig, QueuePolicy}` runs up, on purpose: the profile
//! resolves each section into its layer's own settings type, and those types belong to
//! admission, which reads no profile file (a user builds an `AdmissionConfig` in code without
//! one). The same holds for `profile/mod.rs`, which keeps the resolved `AdmissionConfig`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::issues::Issues;
use super::routes::RouteRule;
use crate::admission::{AdmissionConfig, QueuePolicy};

/// The profile's `admission:` section (rule [C21](crate::contract#c21)): how many requests do
/// their work at once, how many may wait, in which order, and what each route costs. Resolved
/// into [`Profile::admission`](crate::Profile::admission).
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

impl AdmissionSpec {
    /// The admission configuration: a positive limit, counts and durations not negative, each
    /// route's path absolute and listed once with a cost under `max`. A route of `routes` that
    /// this section does not name costs its minimum budget; any other, `refuse_below`.
    pub(super) fn resolve(
        &self,
        refuse_below: Duration,
        max: Duration,
        routes: &[RouteRule],
        issues: &mut Issues,
    ) -> AdmissionConfig {
        let limit = issues.count("admission.limit", self.limit, true);
        let bound = issues.count("admission.queue_bound", self.queue_bound, false);
        let lifo_after = issues.millis("admission.lifo_after_ms", self.lifo_after_ms);
        let policy = match self.policy {
            AdmissionPolicySpec::Edf => QueuePolicy::EarliestDeadlineFirst,
            AdmissionPolicySpec::AdaptiveLifo => QueuePolicy::AdaptiveLifo { after: lifo_after },
        };
        let mut config = AdmissionConfig::new(limit)
            .with_queue_bound(bound)
            .with_policy(policy)
            .with_cost(refuse_below);
        for (i, r) in self.routes.iter().enumerate() {
            let field = format!("admission.routes[{i}]");
            if !r.path.starts_with('/') {
                issues.push(
                    &format!("{field}.path"),
                    format!("`{}` must start with `/`", r.path),
                );
            }
            if self.routes[..i].iter().any(|o| o.path == r.path) {
                issues.push(
                    &format!("{field}.path"),
                    format!("`{}` is listed twice", r.path),
                );
            }
            let cost = issues.millis(&format!("{field}.cost_ms"), r.cost_ms);
            if max > Duration::ZERO && cost > max {
                issues.push(
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
        for r in routes {
            config = config.with_route(r.pattern().to_owned(), r.min_budget);
        }
        config
    }
}
