//! The profile's top-level numbers: the edge total, the maximum, the hop's margins and refuse
//! threshold, the stream lifetime and the low-budget mark (rules [C2](crate::contract#c2),
//! [C3](crate::contract#c3), [C8](crate::contract#c8), [C9](crate::contract#c9),
//! [C13](crate::contract#c13)), and the kill switch ([C24](crate::contract#c24)).

use std::time::Duration;

use super::ProfileSpec;
use super::issues::Issues;
use crate::budget::HopPolicy;

/// The top-level numbers, each checked on its own.
pub(super) struct Budgets {
    pub(super) policy: HopPolicy,
    pub(super) edge_total: Duration,
    pub(super) max: Duration,
    pub(super) stream_lifetime: Duration,
    pub(super) low_budget: Duration,
}

impl Budgets {
    /// Read each number: none negative, and the edge total, the maximum and the stream
    /// lifetime greater than zero.
    pub(super) fn check(spec: &ProfileSpec, issues: &mut Issues) -> Self {
        let edge_total = issues.positive_millis("edge_total_ms", spec.edge_total_ms);
        let max = issues.positive_millis("max_ms", spec.max_ms);
        let hop_margin = issues.millis("hop_margin_ms", spec.hop_margin_ms);
        let transit = issues.millis("transit_allowance_ms", spec.transit_allowance_ms);
        let refuse_below = issues.millis("refuse_below_ms", spec.refuse_below_ms);
        let stream_lifetime = issues.positive_millis("stream_lifetime_ms", spec.stream_lifetime_ms);
        let low_budget = issues.millis("low_budget_ms", spec.low_budget_ms);
        Self {
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
        }
    }

    /// Check the budgets against the maximum: the edge total, the refuse threshold and each
    /// route's minimum budget fit under it, and the margin plus transit allowance leave some.
    /// Skipped when the maximum itself is bad (already reported).
    pub(super) fn check_below_max(&self, route_budgets: &[Duration], issues: &mut Issues) {
        let max = self.max;
        if max == Duration::ZERO {
            return;
        }
        let HopPolicy {
            hop_margin,
            transit_allowance,
            refuse_below,
            ..
        } = self.policy;
        if self.edge_total > max {
            issues.push(
                "edge_total_ms",
                format!(
                    "edge total {} ms is above the maximum {} ms",
                    self.edge_total.as_millis(),
                    max.as_millis()
                ),
            );
        }
        if refuse_below > max {
            issues.push(
                "refuse_below_ms",
                format!(
                    "threshold {} ms is above the maximum {} ms",
                    refuse_below.as_millis(),
                    max.as_millis()
                ),
            );
        }
        if hop_margin + transit_allowance >= max {
            issues.push(
                "hop_margin_ms",
                "margin plus transit allowance leaves no budget below the maximum".into(),
            );
        }
        for (i, b) in route_budgets.iter().enumerate() {
            if *b > max {
                issues.push(
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
}
