//! `--overload`: the leaf at a fixed capacity behind hopbudget's admission layer, and the
//! budget every request gets.

use std::time::Duration;

/// Leaf capacity in overload mode: this many requests at once, each this long. Small on
/// purpose (20 requests/s): the leaf, not the chain's own CPU, must be the bottleneck at 3x,
/// even for a debug build on a shared two-core machine.
pub(super) const CAPACITY_SLOTS: usize = 1;
pub(super) const CAPACITY_WORK: Duration = Duration::from_millis(50);
/// What the leaf keeps for its answer's way back up the chain when it admits known work.
const RETURN_ALLOWANCE: Duration = Duration::from_millis(10);
/// The leaf's profile in overload mode: its slots as the admission limit, and the route's
/// cost the work plus the return allowance.
pub(super) fn overload_leaf_profile() -> String {
    format!(
        "service: leaf\nroutes: [{{path: /, min_budget_ms: {work}}}]\n\
         admission: {{limit: {slots}, queue_bound: 1024, routes: [{{path: /, cost_ms: {cost}}}]}}\n",
        work = CAPACITY_WORK.as_millis(),
        slots = CAPACITY_SLOTS,
        cost = (CAPACITY_WORK + RETURN_ALLOWANCE).as_millis(),
    )
}

/// The client budget of every overload request.
pub(super) const OVERLOAD_BUDGET_MS: u64 = 250;

/// Requests per second the leaf can finish in overload mode.
pub(super) fn capacity_per_s() -> f64 {
    CAPACITY_SLOTS as f64 / CAPACITY_WORK.as_secs_f64()
}
