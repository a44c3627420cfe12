//! The `routes:` section: per-route minimum budget (rule [C3](crate::contract#c3)), mode
//! ([C13](crate::contract#c13)) and learned threshold.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::issues::Issues;
use crate::learned::{LearnConfig, LearnedThreshold};

/// One route's settings.
///
/// See the [example](crate::Profile#examples).
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
/// See the [example](crate::Profile#examples), whose `/quote` route learns.
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
    fn resolve(&self, field: &str, issues: &mut Issues) -> LearnConfig {
        let quantile = self
            .quantile
            .strip_prefix('p')
            .and_then(|n| n.parse::<f64>().ok())
            .filter(|n| *n > 0.0 && *n <= 100.0)
            .map(|n| n / 100.0);
        if quantile.is_none() {
            issues.push(
                &format!("{field}.quantile"),
                format!(
                    "`{}` is not a quantile; write `p50`, `p99` or `pN` with 0 < N <= 100",
                    self.quantile
                ),
            );
        }
        if self.window_ms < MIN_LEARN_WINDOW_MS {
            issues.push(
                &format!("{field}.window_ms"),
                format!(
                    "must be at least {MIN_LEARN_WINDOW_MS} ms (got {})",
                    self.window_ms
                ),
            );
        }
        let min_samples = u32::try_from(self.min_samples).ok().filter(|n| *n > 0);
        if min_samples.is_none() {
            issues.push(
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

/// How a route's response is bounded (rule [C13](crate::contract#c13)).
///
/// See the [example](crate::Profile#examples).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RouteMode {
    /// The deadline bounds the whole response.
    #[default]
    Request,
    /// The deadline bounds time to the first body chunk; then the stream lifetime applies.
    Stream,
}

/// Each route's minimum budget on its own: its `min_budget_ms`, else `refuse_below`.
pub(super) fn min_budgets(
    routes: &[RouteSpec],
    refuse_below: Duration,
    issues: &mut Issues,
) -> Vec<Duration> {
    routes
        .iter()
        .enumerate()
        .map(|(i, r)| {
            r.min_budget_ms
                .map(|v| issues.millis(&format!("routes[{i}].min_budget_ms"), v))
                .unwrap_or(refuse_below)
        })
        .collect()
}

/// The routes' rules: each path absolute and listed once, each `learn:` valid.
pub(super) fn resolve(
    routes: &[RouteSpec],
    min_budgets: Vec<Duration>,
    issues: &mut Issues,
) -> Vec<RouteRule> {
    let mut rules = Vec::with_capacity(routes.len());
    for (i, (r, min_budget)) in routes.iter().zip(min_budgets).enumerate() {
        if !r.path.starts_with('/') {
            issues.push(
                &format!("routes[{i}].path"),
                format!("`{}` must start with `/`", r.path),
            );
        }
        if routes[..i].iter().any(|o| o.path == r.path) {
            issues.push(
                &format!("routes[{i}].path"),
                format!("`{}` is listed twice", r.path),
            );
        }
        let learned = r.learn.as_ref().map(|l| {
            let config = l.resolve(&format!("routes[{i}].learn"), issues);
            Arc::new(LearnedThreshold::new(min_budget, config))
        });
        rules.push(RouteRule {
            pattern: r.path.clone(),
            min_budget,
            mode: r.mode,
            learned,
        });
    }
    rules
}

/// One route's resolved settings.
///
/// See the [example](crate::Profile#examples).
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
    /// `min_budget` (rule [C3](crate::contract#c3)).
    ///
    /// See the [example](crate::Profile#examples).
    pub fn threshold(&self) -> Duration {
        self.learned
            .as_ref()
            .map_or(self.min_budget, |l| l.threshold())
    }

    /// The refuse threshold as of `now`, for a caller that has read the clock already.
    ///
    /// See the [example](crate::Profile#examples).
    pub fn threshold_at(&self, now: tokio::time::Instant) -> Duration {
        self.learned
            .as_ref()
            .map_or(self.min_budget, |l| l.threshold_at(now))
    }

    /// The route's learned threshold, if it learns. The server layers (every adapter of
    /// [`crate::hop`]) record each completed request's latency into it; other code may
    /// record too.
    ///
    /// See the [example](crate::Profile#examples).
    pub fn learned(&self) -> Option<&LearnedThreshold> {
        self.learned.as_deref()
    }

    pub(crate) fn learned_shared(&self) -> Option<&Arc<LearnedThreshold>> {
        self.learned.as_ref()
    }

    /// Whether this rule applies to `path`.
    ///
    /// See the [example](crate::Profile#examples).
    pub fn matches(&self, path: &str) -> bool {
        match self.pattern.strip_suffix('*') {
            Some(prefix) => path.starts_with(prefix),
            None => path == self.pattern,
        }
    }

    /// The path or prefix pattern.
    ///
    /// See the [example](crate::Profile#examples).
    pub fn pattern(&self) -> &str {
        &self.pattern
    }
}
