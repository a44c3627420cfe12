//! PostgreSQL queries that obey the request's budget (feature `postgres`).
//!
//! The database is where a propagated budget pays off most: a query that receives 300 ms can
//! tell the server so, and the server stops a 4 s plan at 300 ms instead of running it for a
//! caller that gave up. [`BudgetPool`] wraps a `deadpool-postgres` pool and runs each query or
//! transaction like this:
//!
//! 1. **Refuse before start** (rule [C3](crate::contract#c3)): when the forward budget (remaining minus hop margin
//!    and transit allowance, rule [C2](crate::contract#c2)) is below the query's stated cost, nothing is sent and no
//!    connection is taken: [`BudgetError::Refused`] with the required and remaining budget.
//!    A request waiting for a pooled connection is refused as soon as the budget left could
//!    no longer cover the cost (rule [C21](crate::contract#c21)).
//! 2. **The server knows the deadline**: the work runs in a transaction that starts with
//!    `SET LOCAL statement_timeout` equal to the forward budget, so the server cancels a
//!    statement that would outlive it, and the setting ends with the transaction.
//! 3. **Expiry is expiry** (rule [C4](crate::contract#c4)): a statement the server cancelled for that timeout
//!    (SQLSTATE 57014) is [`BudgetError::Expired`], not an opaque database error.
//! 4. **The server stops when the caller goes** (rules [C5](crate::contract#c5), [C7](crate::contract#c7)): when the budget ends first
//!    (the deadline passes across several statements, or the request is cancelled) a real
//!    cancel request is sent to the server and the call waits briefly for the server to
//!    acknowledge it, then answers `Expired` or `Cancelled`. When the future is dropped
//!    mid-query, a spawned task sends the cancel request.
//! 5. **A cancel reaches only its own work** (rule [C22](crate::contract#c22)): a connection to which a cancel was
//!    sent is closed, never handed to the next request, because the server may act on the
//!    cancel later, on whatever that connection runs next (see `in_flight.rs`). So is a
//!    connection the server ended ([`QueryError::ConnectionLost`]). The pool opens new ones.
//!
//! A handler can return a [`QueryError`] as it returns a [`BudgetError`]: it converts into a
//! `tonic::Status` (feature `grpc`) and an axum response (feature `axum`). A budget outcome
//! is the contract's answer; a database out of reach is UNAVAILABLE / 503 without the refusal
//! headers; a database error is this service's own failure, INTERNAL / 500, naming its
//! SQLSTATE but not the server's message, which can quote data (see `answer.rs`).
//!
//! ```no_run
//! # async fn example() -> Result<(), hopbudget::postgres::QueryError> {
//! use std::time::Duration;
//! use hopbudget::postgres::BudgetPool;
//! use hopbudget::{HopPolicy, RequestBudget};
//!
//! let pool = BudgetPool::connect("postgres://postgres@127.0.0.1:5432/test", 4)?;
//! let budget = RequestBudget::local(Duration::from_millis(300), HopPolicy::DEFAULT);
//! // The report query usually takes 40 ms: refuse it outright below that.
//! let rows = pool
//!     .query(&budget, Duration::from_millis(40), "SELECT 1 + $1::int", &[&41i32])
//!     .await?;
//! assert_eq!(rows[0].get::<_, i32>(0), 42);
//! # Ok(()) }
//! ```
//!
//! Guide: *The database, the cache, and cheaper paths*, `docs/guide/database-and-cache.md` in the repository.

use std::time::Duration;

use deadpool_postgres::{Manager, Object, Pool};
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row};

use crate::budget::Deadline;
use crate::budget::RequestBudget;
use crate::error::{BudgetError, Refused};

#[cfg(any(feature = "grpc", feature = "axum"))]
mod answer;
mod error;
mod in_flight;

use error::classify;
use in_flight::{After, InFlight};

pub use deadpool_postgres::Transaction;
pub use error::QueryError;

/// How long a call whose budget ended waits for the server to acknowledge the cancel request
/// before it answers anyway. The connection is closed either way ([C22](crate::contract#c22)).
const DEFAULT_CANCEL_GRACE: Duration = Duration::from_secs(2);

/// A `deadpool-postgres` pool whose queries run under the request's budget.
///
/// Cloning is cheap and shares the pool.
///
/// # Examples
///
/// ```no_run
/// # async fn example() -> Result<(), hopbudget::postgres::QueryError> {
/// use std::time::Duration;
/// use hopbudget::postgres::{BudgetPool, QueryError, Transaction};
/// use hopbudget::{BudgetError, HopPolicy, RequestBudget};
///
/// let ms = Duration::from_millis;
/// let pool = BudgetPool::connect("postgres://postgres@127.0.0.1:5432/test", 4)?
///     .with_cancel_grace(ms(500));
/// println!("{} connections open", pool.pool().status().size);
/// // Or wrap a pool you built: `BudgetPool::new(deadpool_pool)`.
/// let budget = RequestBudget::local(ms(300), HopPolicy::DEFAULT);
///
/// let changed = pool
///     .execute(&budget, ms(20), "UPDATE stock SET n = n - 1 WHERE sku = $1", &[&"sku-1"])
///     .await?;
/// // Two statements, one statement timeout, one commit.
/// let total: i64 = pool
///     .transaction(&budget, ms(40), async |tx: &Transaction<'_>| {
///         tx.execute("INSERT INTO orders (sku) VALUES ($1)", &[&"sku-1"]).await?;
///         let row = tx.query_one("SELECT count(*) FROM orders", &[]).await?;
///         Ok(row.get(0))
///     })
///     .await?;
///
/// // A 4 s report inside a 300 ms budget is refused before anything is sent.
/// match pool.query(&budget, ms(4_000), "SELECT * FROM report()", &[]).await {
///     Err(e @ QueryError::Budget(_)) => assert!(matches!(e.budget(), Some(BudgetError::Refused(_)))),
///     other => panic!("{other:?}"),
/// }
/// # let _ = (changed, total);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct BudgetPool {
    pool: Pool,
    cancel_grace: Duration,
}

impl BudgetPool {
    /// Wrap an existing pool.
    ///
    /// See the [example](BudgetPool#examples).
    pub fn new(pool: Pool) -> Self {
        Self {
            pool,
            cancel_grace: DEFAULT_CANCEL_GRACE,
        }
    }

    /// A pool of at most `max_size` plain-TCP connections to `url`
    /// (`postgres://user@host:port/db`). Connections open lazily, on first use.
    ///
    /// See the [example](BudgetPool#examples).
    pub fn connect(url: &str, max_size: usize) -> Result<Self, QueryError> {
        let config: tokio_postgres::Config = url.parse().map_err(QueryError::Db)?;
        let manager = Manager::new(config, NoTls);
        let pool = Pool::builder(manager)
            .max_size(max_size)
            .build()
            .map_err(|e| QueryError::Config(e.to_string()))?;
        Ok(Self::new(pool))
    }

    /// How long a call whose budget ended waits for the server to acknowledge its cancel
    /// request before it answers (default 2 s). Either way that connection is then closed,
    /// not reused, so a cancel still in flight cannot reach another request ([C22](crate::contract#c22)).
    ///
    /// See the [example](BudgetPool#examples).
    pub fn with_cancel_grace(mut self, grace: Duration) -> Self {
        self.cancel_grace = grace;
        self
    }

    /// The pool underneath, for its status or for work outside any budget.
    ///
    /// See the [example](BudgetPool#examples).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Run one statement returning rows, under `budget`; `cost` is what it usually needs.
    ///
    /// See the [example](BudgetPool#examples).
    pub async fn query(
        &self,
        budget: &RequestBudget,
        cost: Duration,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, QueryError> {
        self.transaction(budget, cost, async |tx: &Transaction<'_>| {
            tx.query(sql, params).await
        })
        .await
    }

    /// Run one statement returning the number of rows it changed, under `budget`.
    ///
    /// See the [example](BudgetPool#examples).
    pub async fn execute(
        &self,
        budget: &RequestBudget,
        cost: Duration,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, QueryError> {
        self.transaction(budget, cost, async |tx: &Transaction<'_>| {
            tx.execute(sql, params).await
        })
        .await
    }

    /// Run `work` in a transaction under `budget`: refused before start when the forward
    /// budget is below `cost`, committed when `work` succeeds, rolled back otherwise. Every
    /// statement inside carries the statement timeout set at the start, and the budget's own
    /// deadline bounds the whole transaction.
    ///
    /// See the [example](BudgetPool#examples).
    pub async fn transaction<T, F>(
        &self,
        budget: &RequestBudget,
        cost: Duration,
        work: F,
    ) -> Result<T, QueryError>
    where
        F: AsyncFnOnce(&Transaction<'_>) -> Result<T, tokio_postgres::Error>,
    {
        // C3: nothing is sent and no connection taken for work that cannot finish.
        budget.admit_forward_for(cost)?;
        let conn = self.checkout(budget, cost).await?;
        // Time passed while waiting for the connection: check again, then tell the server.
        let timeout = budget.admit_forward_for(cost)?;
        let mut conn = InFlight::new(conn);
        let (result, after) = run(conn.client(), budget, timeout, work, self.cancel_grace).await;
        conn.settle(after);
        result
    }

    /// Take a connection, waiting only while the budget could still cover `cost` ([C21](crate::contract#c21)).
    async fn checkout(&self, budget: &RequestBudget, cost: Duration) -> Result<Object, QueryError> {
        let reserve = budget.policy().reserve();
        // Unenforced (C24): wait for a connection as long as the caller does.
        let last_start = if budget.is_enforced() {
            budget
                .deadline()
                .saturating_sub(cost.saturating_add(reserve))
        } else {
            Deadline::after(Duration::MAX)
        };
        tokio::select! {
            biased;
            cause = budget.done() => Err(BudgetError::from(cause).into()),
            got = tokio::time::timeout_at(last_start.instant(), self.pool.get()) => match got {
                Ok(Ok(conn)) => Ok(conn),
                Ok(Err(e)) => Err(QueryError::Pool(e)),
                Err(_) => Err(BudgetError::from(Refused::new(cost, budget.forward())).into()),
            },
        }
    }
}

/// Run `work` in a transaction under a statement timeout of `timeout`, racing the budget.
/// Returns the result and what the connection is fit for afterwards.
async fn run<T, F>(
    client: &mut deadpool_postgres::ClientWrapper,
    budget: &RequestBudget,
    timeout: Duration,
    work: F,
    grace: Duration,
) -> (Result<T, QueryError>, After)
where
    F: AsyncFnOnce(&Transaction<'_>) -> Result<T, tokio_postgres::Error>,
{
    let cancel = client.cancel_token();
    // Whole milliseconds, rounded down (C2); zero would mean "no timeout" to the server, and
    // admission already refused a forward budget below the cost, so at least 1 ms is left.
    // Unenforced (C24): the server keeps its own statement timeout.
    let set_timeout = budget.is_enforced().then(|| {
        format!(
            "SET LOCAL statement_timeout = {}",
            timeout.as_millis().max(1)
        )
    });
    let statements = async {
        let tx = client.transaction().await?;
        if let Some(set_timeout) = &set_timeout {
            tx.batch_execute(set_timeout).await?;
        }
        let out = work(&tx).await?;
        if let Some(cause) = budget.end_cause() {
            // Never commit for a caller that has gone: dropping `tx` rolls back.
            return Ok(Err(BudgetError::from(cause).into()));
        }
        tx.commit().await?;
        Ok(Ok(out))
    };
    let mut statements = std::pin::pin!(statements);
    tokio::select! {
        biased;
        done = &mut statements => match done {
            Ok(out) => (out, After::Reuse),
            Err(e) => match classify(e, budget) {
                e @ QueryError::ConnectionLost(_) => (Err(e), After::Discard),
                e => (Err(e), After::Reuse),
            },
        },
        cause = budget.done() => {
            // The budget ended before the server answered: stop the server's work too (C7),
            // and wait a little for it to say so, so that the work has stopped when the
            // caller hears of it. Whatever the server answers, the cancel may still be in
            // flight (the statement may have ended on its own just before it), so the
            // connection is closed rather than reused (C22, see `in_flight.rs`).
            let sent = tokio::time::timeout(grace, cancel.cancel_query(NoTls)).await;
            if matches!(sent, Ok(Ok(()))) {
                let _ = tokio::time::timeout(grace, &mut statements).await;
            }
            (Err(BudgetError::from(cause).into()), After::Discard)
        }
    }
}
