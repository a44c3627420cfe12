//! A read-through Redis cache that serves stale when a recompute cannot finish (feature `redis`).
//!
//! [`StaleCache`] keeps each value under one key whose Redis TTL is the fresh period plus the
//! stale period. A read fetches the value and its remaining TTL in one round trip: more TTL
//! left than the stale period means fresh; less means stale but servable. Freshness is Redis's
//! own clock, so instances whose clocks disagree still agree on what is fresh (rule [C1](crate::contract#c1)).
//!
//! What a read does follows [`crate::cache::plan`]: serve fresh; recompute a stale or missing
//! value when the remaining budget covers the recompute's stated cost; otherwise serve the
//! stale value, marked [`CacheChoice::Stale`], or refuse when there is nothing to serve. Every
//! Redis command is bounded by the budget's deadline, and the recompute runs under the budget
//! ([`RequestBudget::run`]). The choice is recorded on the read's `cache.read` span
//! (`cache.choice`) and counted in `hopbudget_cache_reads_total` with the `metrics` feature.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use hopbudget::redis::StaleCache;
//! use hopbudget::{HopPolicy, RequestBudget};
//!
//! let client = redis::Client::open("redis://127.0.0.1:6379")?;
//! let conn = client.get_multiplexed_async_connection().await?;
//! let cache = StaleCache::new(conn, "catalog", "prices")
//!     .fresh_for(Duration::from_secs(30))
//!     .stale_for(Duration::from_secs(600));
//!
//! let budget = RequestBudget::local(Duration::from_millis(80), HopPolicy::DEFAULT);
//! // Recomputing the price list takes about 250 ms: with 80 ms left a stale list is served.
//! let price = cache
//!     .get(&budget, "price:sku-42", Duration::from_millis(250), async || {
//!         Ok::<_, std::convert::Infallible>("12.50".to_string())
//!     })
//!     .await?;
//! println!("{} ({})", price.value, price.choice.as_str());
//! if price.is_stale() {
//!     // Served past its freshness: the page may say "prices as of ..."
//! }
//!
//! // With nothing cached and no time to recompute, the read is refused before any work.
//! let short = RequestBudget::local(Duration::from_millis(5), HopPolicy::DEFAULT);
//! let miss = cache
//!     .get(&short, "price:sku-43", Duration::from_millis(250), async || {
//!         Ok::<_, std::convert::Infallible>("9.90".to_string())
//!     })
//!     .await;
//! if let Err(e) = miss {
//!     assert!(e.budget().is_some(), "{e}");
//! }
//! # Ok(()) }
//! ```
//!
//! Guide: *The database, the cache, and cheaper paths*, `docs/guide/database-and-cache.md` in the repository.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use ::redis::aio::ConnectionLike;
use ::redis::{FromRedisValue, RedisError, ToRedisArgs, ToSingleRedisArg};
use tracing::Instrument;

use crate::budget::RequestBudget;
use crate::cache::{CacheChoice, CacheReads, Lookup, Plan, plan};
use crate::error::BudgetError;

/// A value read through the cache, with what the read did to get it.
///
/// See the [module example](crate::redis).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cached<V> {
    /// The value.
    pub value: V,
    /// `Fresh`, `Recomputed` or `Stale` (served because a recompute could not finish).
    pub choice: CacheChoice,
}

impl<V> Cached<V> {
    /// Whether the value is stale: served past its freshness because the budget was short.
    ///
    /// See the [module example](crate::redis).
    pub fn is_stale(&self) -> bool {
        self.choice == CacheChoice::Stale
    }
}

/// Why a read returned no value.
///
/// See the [module example](crate::redis).
#[derive(Debug)]
#[non_exhaustive]
pub enum CacheError<E> {
    /// Refused (nothing to serve and no time to recompute), expired or cancelled.
    Budget(BudgetError),
    /// Redis failed.
    Redis(RedisError),
    /// The recompute failed with its own error.
    Recompute(E),
}

impl<E> CacheError<E> {
    /// The budget error, if that is why the read failed.
    ///
    /// See the [module example](crate::redis).
    pub fn budget(&self) -> Option<BudgetError> {
        match self {
            CacheError::Budget(e) => Some(*e),
            _ => None,
        }
    }
}

impl<E: fmt::Display> fmt::Display for CacheError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheError::Budget(e) => write!(f, "cache read not completed: {e}"),
            CacheError::Redis(e) => write!(f, "redis: {e}"),
            CacheError::Recompute(e) => write!(f, "recompute failed: {e}"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for CacheError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CacheError::Budget(e) => Some(e),
            CacheError::Redis(e) => Some(e),
            CacheError::Recompute(e) => Some(e),
        }
    }
}

impl<E> From<BudgetError> for CacheError<E> {
    fn from(e: BudgetError) -> Self {
        CacheError::Budget(e)
    }
}

/// A read-through cache on Redis that serves stale when the budget cannot pay for a recompute.
///
/// `C` is any async Redis connection that can be cloned for each read, such as
/// `redis::aio::MultiplexedConnection` or `redis::aio::ConnectionManager`.
///
/// See the [module example](crate::redis).
#[derive(Clone, Debug)]
pub struct StaleCache<C> {
    conn: C,
    fresh_for: Duration,
    stale_for: Duration,
    reads: CacheReads,
}

impl<C> StaleCache<C>
where
    C: ConnectionLike + Clone + Send,
{
    /// A cache named `cache` of `service` over `conn`: values fresh for 60 s, then servable
    /// stale for 10 minutes more. The names label the `cache.read` span and the metric.
    ///
    /// See the [module example](crate::redis).
    pub fn new(conn: C, service: &str, cache: &str) -> Self {
        Self {
            conn,
            fresh_for: Duration::from_secs(60),
            stale_for: Duration::from_secs(600),
            reads: CacheReads::new(service, cache),
        }
    }

    /// How long a written value is fresh (at least 1 ms).
    ///
    /// See the [module example](crate::redis).
    pub fn fresh_for(mut self, fresh_for: Duration) -> Self {
        self.fresh_for = fresh_for.max(Duration::from_millis(1));
        self
    }

    /// How long after its freshness a value may still be served stale.
    ///
    /// See the [module example](crate::redis).
    pub fn stale_for(mut self, stale_for: Duration) -> Self {
        self.stale_for = stale_for;
        self
    }

    /// Read `key`, recomputing it with `recompute` when it is stale or missing and the budget
    /// covers `recompute_cost`; serving it stale when it does not.
    ///
    /// A recomputed value is written back with the fresh-plus-stale TTL; a failed write-back
    /// is logged and the value still returned.
    ///
    /// See the [module example](crate::redis).
    pub async fn get<V, E, F>(
        &self,
        budget: &RequestBudget,
        key: &str,
        recompute_cost: Duration,
        recompute: F,
    ) -> Result<Cached<V>, CacheError<E>>
    where
        V: FromRedisValue + ToRedisArgs + ToSingleRedisArg + Send + Sync,
        F: AsyncFnOnce() -> Result<V, E>,
    {
        let span = self.reads.span(key, budget, recompute_cost);
        let read = self.read(budget, key, recompute_cost, recompute, &span);
        let result = read.instrument(span.clone()).await;
        match &result {
            Ok(cached) => self.reads.record(&span, cached.choice),
            Err(CacheError::Budget(BudgetError::Refused(_))) => {
                self.reads.record(&span, CacheChoice::Refused)
            }
            Err(_) => {}
        }
        result
    }

    async fn read<V, E, F>(
        &self,
        budget: &RequestBudget,
        key: &str,
        recompute_cost: Duration,
        recompute: F,
        span: &tracing::Span,
    ) -> Result<Cached<V>, CacheError<E>>
    where
        V: FromRedisValue + ToRedisArgs + ToSingleRedisArg + Send + Sync,
        F: AsyncFnOnce() -> Result<V, E>,
    {
        let mut conn = self.conn.clone();
        let (value, ttl_ms): (Option<V>, i64) = bounded(
            budget,
            ::redis::pipe()
                .cmd("GET")
                .arg(key)
                .cmd("PTTL")
                .arg(key)
                .query_async(&mut conn),
        )
        .await?;
        let stale_ms = i64::try_from(self.stale_for.as_millis()).unwrap_or(i64::MAX);
        let lookup = match (&value, ttl_ms) {
            (None, _) => Lookup::Missing,
            // -1: no TTL at all (written by someone else): never goes stale.
            (Some(_), -1) => Lookup::Fresh,
            (Some(_), ttl) if ttl > stale_ms => Lookup::Fresh,
            (Some(_), _) => Lookup::Stale,
        };
        match (plan(budget, recompute_cost, lookup)?, value) {
            (Plan::Serve(choice), Some(value)) => Ok(Cached { value, choice }),
            (Plan::Serve(_), None) | (Plan::Recompute, _) => {
                span.record("cache.choice", CacheChoice::Recomputed.as_str());
                let value = budget
                    .run(recompute())
                    .await?
                    .map_err(CacheError::Recompute)?;
                self.write_back(budget, &mut conn, key, &value).await;
                Ok(Cached {
                    value,
                    choice: CacheChoice::Recomputed,
                })
            }
        }
    }

    async fn write_back<V>(&self, budget: &RequestBudget, conn: &mut C, key: &str, value: &V)
    where
        V: ToRedisArgs + ToSingleRedisArg + Send + Sync,
    {
        let ttl_ms =
            u64::try_from((self.fresh_for + self.stale_for).as_millis()).unwrap_or(u64::MAX);
        let mut set = ::redis::cmd("SET");
        set.arg(key).arg(value).arg("PX").arg(ttl_ms);
        let write = set.query_async::<()>(conn);
        if let Err(e) = bounded::<(), std::convert::Infallible>(budget, write).await {
            tracing::debug!(error = %e, "cache write-back failed; the value is still served");
        }
    }
}

/// Run one Redis command, stopped at the budget's deadline (or when it is cancelled).
async fn bounded<T, E>(
    budget: &RequestBudget,
    command: impl Future<Output = Result<T, RedisError>>,
) -> Result<T, CacheError<E>> {
    match budget.run(command).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(CacheError::Redis(e)),
        Err(e) => Err(CacheError::Budget(e)),
    }
}
