//! Serve-stale for read-through caches: recompute when it fits the budget, else serve stale.
//!
//! A cache entry past its freshness is a question the budget can answer. If the time left
//! covers the recompute, recompute; if it does not, the stale value answers in time and a
//! recompute that could not finish is never started (rule [C3](crate::contract#c3)). With nothing stale to serve the
//! read is refused before any work. This module holds that decision and its record, free of
//! any store: [`plan`] decides, [`CacheReads`] puts the choice on a `cache.read` span
//! (`cache.choice`) and, with the `metrics` feature, counts it in
//! `hopbudget_cache_reads_total{service, cache, choice}` (rule [C14](crate::contract#c14)). The Redis-backed cache is
//! `hopbudget::redis::StaleCache` (feature `redis`).
//!
//! See the examples on [`plan`] (the decision) and [`CacheReads`] (a whole read, recorded).
//!
//! Guide: *The database, the cache, and cheaper paths*, `docs/guide/database-and-cache.md` in the repository.

use std::sync::Arc;
use std::time::Duration;

use tracing::Span;
use tracing::field::Empty;

use crate::budget::RequestBudget;
use crate::error::BudgetError;
use crate::observe::Counter;

/// What the store holds for a key.
///
/// See the examples on [`plan`] and [`CacheReads`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// A fresh value.
    Fresh,
    /// A value past its freshness but still kept for serving stale.
    Stale,
    /// Nothing.
    Missing,
}

/// What a read did: the `cache.choice` span field and the `choice` metric label.
///
/// See the [example](CacheReads#examples).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CacheChoice {
    /// A fresh value was served.
    Fresh,
    /// The value was recomputed inside the budget (it was stale or missing).
    Recomputed,
    /// A stale value was served: a recompute could not have finished in the budget.
    Stale,
    /// Nothing to serve and no time to recompute: refused before any work (rule [C3](crate::contract#c3)).
    Refused,
}

impl CacheChoice {
    /// All four, in metric-key order.
    ///
    /// See the [example](CacheReads#examples).
    pub const ALL: [CacheChoice; 4] = [
        CacheChoice::Fresh,
        CacheChoice::Recomputed,
        CacheChoice::Stale,
        CacheChoice::Refused,
    ];

    /// `fresh`, `recomputed`, `stale` or `refused`.
    ///
    /// See the [example](CacheReads#examples).
    pub const fn as_str(self) -> &'static str {
        match self {
            CacheChoice::Fresh => "fresh",
            CacheChoice::Recomputed => "recomputed",
            CacheChoice::Stale => "stale",
            CacheChoice::Refused => "refused",
        }
    }
}

/// What to do after a lookup.
///
/// See the examples on [`plan`] and [`CacheReads`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Serve what the store has, as `choice` ([`CacheChoice::Fresh`] or [`CacheChoice::Stale`]).
    Serve(CacheChoice),
    /// Recompute: the budget covers the recompute's cost.
    Recompute,
}

/// Decide what a read does with `lookup`, given the budget and what a recompute costs.
///
/// A fresh value is served. A stale or missing one is recomputed when the remaining budget
/// covers `recompute_cost`; otherwise stale is served, or, with nothing to serve, the read is
/// refused with the required and remaining budget. A budget that has already ended is
/// `Expired` or `Cancelled` whatever the store holds.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use hopbudget::cache::{plan, CacheChoice, Lookup, Plan};
/// use hopbudget::{HopPolicy, RequestBudget};
///
/// let budget = RequestBudget::local(Duration::from_millis(80), HopPolicy::DEFAULT);
/// let recompute = Duration::from_millis(250);
/// assert_eq!(plan(&budget, recompute, Lookup::Stale), Ok(Plan::Serve(CacheChoice::Stale)));
/// assert!(plan(&budget, recompute, Lookup::Missing).is_err());
/// assert_eq!(plan(&budget, Duration::from_millis(50), Lookup::Stale), Ok(Plan::Recompute));
/// # }
/// ```
pub fn plan(
    budget: &RequestBudget,
    recompute_cost: Duration,
    lookup: Lookup,
) -> Result<Plan, BudgetError> {
    match (lookup, budget.admit(recompute_cost)) {
        (_, Err(e @ (BudgetError::Expired | BudgetError::Cancelled))) => Err(e),
        (Lookup::Fresh, _) => Ok(Plan::Serve(CacheChoice::Fresh)),
        (_, Ok(())) => Ok(Plan::Recompute),
        (Lookup::Stale, Err(_)) => Ok(Plan::Serve(CacheChoice::Stale)),
        (Lookup::Missing, Err(e)) => Err(e),
    }
}

/// The record of one cache's reads: a `cache.read` span per read and, with the `metrics`
/// feature, `hopbudget_cache_reads_total` by choice.
///
/// Build one per cache and share it; metric keys are prepared at construction.
///
/// # Examples
///
/// A read-through cache over a `HashMap`, deciding with [`plan`] and recording the choice:
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::collections::HashMap;
/// use std::time::Duration;
/// use hopbudget::cache::{plan, CacheChoice, CacheReads, Lookup, Plan};
/// use hopbudget::{HopPolicy, RequestBudget};
///
/// let reads = CacheReads::new("catalog", "prices");
/// assert_eq!(reads.cache(), "prices");
/// let store = HashMap::from([("sku-1", (990, Lookup::Stale))]);
/// let budget = RequestBudget::local(Duration::from_millis(80), HopPolicy::DEFAULT);
/// let recompute_cost = Duration::from_millis(250);
///
/// let span = reads.span("sku-1", &budget, recompute_cost);
/// let (price, lookup) = store.get("sku-1").copied().unwrap_or((0, Lookup::Missing));
/// let choice = span.in_scope(|| match plan(&budget, recompute_cost, lookup) {
///     Ok(Plan::Serve(choice)) => choice, // 80 ms cannot pay for 250 ms: serve stale
///     Ok(Plan::Recompute) => CacheChoice::Recomputed,
///     Err(_) => CacheChoice::Refused,
/// });
/// reads.record(&span, choice);
/// assert_eq!((price, choice.as_str()), (990, "stale"));
/// assert_eq!(CacheChoice::ALL.len(), 4);
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct CacheReads {
    service: Arc<str>,
    cache: Arc<str>,
    counters: Arc<[Counter; 4]>,
}

impl CacheReads {
    /// Reads of the cache named `cache` in `service`. Both become metric labels: keep them to
    /// a bounded set (rule [C20](crate::contract#c20)).
    ///
    /// See the [example](CacheReads#examples).
    pub fn new(service: impl Into<Arc<str>>, cache: impl Into<Arc<str>>) -> Self {
        let (service, cache) = (service.into(), cache.into());
        Self {
            counters: Arc::new(
                CacheChoice::ALL.map(|c| Counter::cache_read(&service, &cache, c.as_str())),
            ),
            service,
            cache,
        }
    }

    /// The cache's name.
    ///
    /// See the [example](CacheReads#examples).
    pub fn cache(&self) -> &str {
        &self.cache
    }

    /// A span for one read of `key`: run the read (and any recompute) inside it, then
    /// [`record`](Self::record) the choice on it.
    ///
    /// See the [example](CacheReads#examples).
    pub fn span(&self, key: &str, budget: &RequestBudget, recompute_cost: Duration) -> Span {
        tracing::info_span!(
            "cache.read",
            service.name = %self.service,
            cache.name = %self.cache,
            cache.key = key,
            cache.choice = Empty,
            cache.recompute_cost_ms = ms(recompute_cost),
            deadline.remaining_ms = ms(budget.remaining()),
        )
    }

    /// Record the choice a read made: on `span`'s `cache.choice` field and in the metric.
    ///
    /// See the [example](CacheReads#examples).
    pub fn record(&self, span: &Span, choice: CacheChoice) {
        if !span.is_disabled() {
            span.record("cache.choice", choice.as_str());
        }
        self.counters[choice as usize].increment();
    }
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::HopPolicy;

    fn budget(v: u64) -> RequestBudget {
        RequestBudget::local(Duration::from_millis(v), HopPolicy::DEFAULT)
    }

    const COST: Duration = Duration::from_millis(100);

    #[tokio::test(start_paused = true)]
    async fn recompute_while_it_fits_then_serve_stale() {
        let b = budget(150);
        assert_eq!(plan(&b, COST, Lookup::Stale), Ok(Plan::Recompute));
        assert_eq!(plan(&b, COST, Lookup::Missing), Ok(Plan::Recompute));
        tokio::time::advance(Duration::from_millis(51)).await;
        assert_eq!(
            plan(&b, COST, Lookup::Stale),
            Ok(Plan::Serve(CacheChoice::Stale))
        );
        let Err(BudgetError::Refused(r)) = plan(&b, COST, Lookup::Missing) else {
            panic!("nothing to serve and no time to recompute")
        };
        assert_eq!(
            (r.required(), r.remaining()),
            (COST, Duration::from_millis(99))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn fresh_is_served_however_thin_the_budget() {
        let b = budget(1);
        assert_eq!(
            plan(&b, COST, Lookup::Fresh),
            Ok(Plan::Serve(CacheChoice::Fresh))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_ended_budget_serves_nothing() {
        let b = budget(10);
        tokio::time::advance(Duration::from_millis(10)).await;
        assert_eq!(plan(&b, COST, Lookup::Fresh), Err(BudgetError::Expired));
        let b = budget(1_000);
        b.cancel();
        assert_eq!(plan(&b, COST, Lookup::Stale), Err(BudgetError::Cancelled));
    }

    #[test]
    fn choices_index_their_metric_keys() {
        for (i, c) in CacheChoice::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
    }
}
