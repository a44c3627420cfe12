//! The arithmetic a hop applies before forwarding (rules [C2](crate::contract#c2), [C3](crate::contract#c3)).

use std::time::Duration;

/// The arithmetic a hop applies before forwarding (rules [C2](crate::contract#c2), [C3](crate::contract#c3)). Usually from the profile.
///
/// See the [example](crate::RequestBudget#examples).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HopPolicy {
    /// Time this hop keeps back for itself: serialise, log, tear down.
    pub hop_margin: Duration,
    /// Time allowed for the request to travel to the next hop.
    pub transit_allowance: Duration,
    /// Below this forward budget no downstream call starts.
    pub refuse_below: Duration,
    /// Whether the budget is enforced: calls refused below the threshold, work ended at the
    /// deadline (rules [C3](crate::contract#c3), [C7](crate::contract#c7)). `false` is the profile's kill switch (`enforce: false`, rule
    /// [C24](crate::contract#c24)): the budget is still computed, forwarded and recorded, but nothing is refused or
    /// cut for lack of time. Children and detached budgets inherit it.
    pub enforce: bool,
}

impl HopPolicy {
    /// The defaults of `profiles/default.yaml`: 5 ms margin, 1 ms transit, refuse below 10 ms.
    ///
    /// See the [example](crate::RequestBudget#examples).
    pub const DEFAULT: HopPolicy = HopPolicy {
        hop_margin: Duration::from_millis(5),
        transit_allowance: Duration::from_millis(1),
        refuse_below: Duration::from_millis(10),
        enforce: true,
    };

    /// Margin plus transit allowance: what a hop subtracts before forwarding.
    ///
    /// See the [example](crate::RequestBudget#examples).
    pub const fn reserve(&self) -> Duration {
        self.hop_margin.saturating_add(self.transit_allowance)
    }
}

impl Default for HopPolicy {
    fn default() -> Self {
        Self::DEFAULT
    }
}
