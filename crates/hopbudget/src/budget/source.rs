//! Where a budget came from, and its process-unique id.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::codec::Carrier;

/// Where a request's budget came from.
///
/// See the [example](crate::RequestBudget#examples).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// Read from this wire carrier.
    Carrier(Carrier),
    /// No carrier arrived; the profile's edge total was used (rule [C8](crate::contract#c8)).
    Fallback,
    /// Set in process by the application (an edge, a CLI, a test).
    Local,
    /// Background work rooted at scheduling time (rule [C12](crate::contract#c12)).
    Detached,
}

impl Source {
    /// The name used in traces (`deadline.source`) and metric labels.
    ///
    /// See the [example](crate::RequestBudget#examples).
    pub const fn as_str(&self) -> &'static str {
        match self {
            Source::Carrier(c) => c.name(),
            Source::Fallback => "fallback",
            Source::Local => "local",
            Source::Detached => "detached",
        }
    }
}

/// A process-unique id for a budget, used to link detached work to its parent in traces.
///
/// See the [example](crate::RequestBudget#examples).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BudgetId(u64);

impl BudgetId {
    fn next() -> u64 {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        NEXT.fetch_add(1, Ordering::Relaxed)
    }

    /// The id in `slot`, assigning the next one on first use (zero means unset).
    #[inline]
    pub(super) fn assign(slot: &AtomicU64) -> BudgetId {
        let id = slot.load(Ordering::Relaxed);
        if id != 0 {
            return BudgetId(id);
        }
        let fresh = Self::next();
        match slot.compare_exchange(0, fresh, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => BudgetId(fresh),
            // Another thread assigned one first; the spent number is simply skipped.
            Err(theirs) => BudgetId(theirs),
        }
    }

    /// The id as a number.
    ///
    /// See the [example](crate::RequestBudget#examples).
    pub const fn get(&self) -> u64 {
        self.0
    }
}
