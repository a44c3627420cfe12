//! PostgreSQL queries that obey the request's budget (feature `postgres`).
//!
//! The database is where a propagated budget pays off most: a query that receives 300 ms can
//! tell the server so, and the server stops a 4 s plan at 300 ms instead of running it for a
//! caller that gave up. [`BudgetPool`] wraps a `deadpool-postgres` pool and runs each query or
//! transaction like this:
//!
//! 1. **Refuse before start** (rule C3): when the forward budget (remaining minus hop margin
//!    and transit allowance, rule C2) is below the query's stated cost, nothing is sent and no
//!    connection is taken: [`BudgetError::Refused`] with the required and remaining budget.
//!    A request waiting for a pooled connection is refused as soon as the budget left could
//!    no longer cover the cost (rule C21).
//! 2. **The server knows the deadline**: the work runs in a transaction that starts with
//!    `SET LOCAL statement_timeout` equal to the forward budget, so the server cancels a
//!    statement that would outlive it, and the setting ends with the transaction.
//! 3. **Expiry is expiry** (rule C4): a statement the server cancelled for that timeout
//!    (SQLSTATE 57014) is [`BudgetError::Expired`], not an opaque database error.
//! 4. **The server stops when the caller goes** (rules C5, C7): when the budget ends first
//!    (the deadline passes across several statements, or the request is cancelled) a real
//!    cancel request is sent to the server and the call waits briefly for the server to
//!    acknowledge it, then answers `Expired` or `Cancelled`. When the future is dropped
//!    mid-query, a spawned task sends the cancel request, rolls the transaction back and only
//!    then returns the connection to the pool, so a late cancel can never hit the next user's
//!    query and no connection is leaked.
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

use std::fmt;
use std::time::Duration;

use deadpool_postgres::{Manager, Object, Pool, PoolError};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{CancelToken, NoTls, Row};

use crate::context::RequestBudget;
use crate::error::{BudgetError, Refused};

pub use deadpool_postgres::Transaction;

/// How long a call whose budget ended waits for the server to acknowledge the cancel request
/// before giving up on the connection (it is then closed rather than reused).
const DEFAULT_CANCEL_GRACE: Duration = Duration::from_secs(2);

/// Why a budgeted query did not return rows.
///
/// See the [example](BudgetPool#examples).
#[derive(Debug)]
#[non_exhaustive]
pub enum QueryError {
    /// Refused before start, expired (the server's statement timeout or the deadline), or
    /// cancelled because the caller went away.
    Budget(BudgetError),
    /// The database answered with an error that has nothing to do with the budget.
    Db(tokio_postgres::Error),
    /// No connection could be made or taken from the pool.
    Pool(PoolError),
    /// The pool could not be built from its settings.
    Config(String),
}

impl QueryError {
    /// The budget error, if that is why the query failed.
    ///
    /// See the [example](BudgetPool#examples).
    pub fn budget(&self) -> Option<BudgetError> {
        match self {
            QueryError::Budget(e) => Some(*e),
            _ => None,
        }
    }
}

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueryError::Budget(e) => write!(f, "query not run to completion: {e}"),
            QueryError::Db(e) => write!(f, "database error: {e}"),
            QueryError::Pool(e) => write!(f, "no database connection: {e}"),
            QueryError::Config(e) => write!(f, "bad connection pool settings: {e}"),
        }
    }
}

impl std::error::Error for QueryError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            QueryError::Budget(e) => Some(e),
            QueryError::Db(e) => Some(e),
            QueryError::Pool(e) => Some(e),
            QueryError::Config(_) => None,
        }
    }
}

impl From<BudgetError> for QueryError {
    fn from(e: BudgetError) -> Self {
        QueryError::Budget(e)
    }
}

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
    /// request (default 2 s); past it the connection is closed instead of reused.
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
        let mut guard = InFlight {
            cancel: Some(conn.cancel_token()),
            conn: Some(conn),
        };
        let InFlight { conn, cancel } = &mut guard;
        let Some(client) = conn.as_deref_mut() else {
            unreachable!("the connection was just put there")
        };
        let (result, clean) = run(client, budget, timeout, work, self.cancel_grace).await;
        if clean {
            *cancel = None; // idle: the connection goes back to the pool as it is
        }
        result
    }

    /// Take a connection, waiting only while the budget could still cover `cost` (C21).
    async fn checkout(&self, budget: &RequestBudget, cost: Duration) -> Result<Object, QueryError> {
        let reserve = budget.policy().reserve();
        let last_start = budget
            .deadline()
            .saturating_sub(cost.saturating_add(reserve));
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

/// A pooled connection with a statement possibly in flight. Dropped while `cancel` is set (the
/// caller's future was dropped mid-query), it hands the connection to a task that cancels the
/// statement on the server and rolls back before the pool can give the connection out again.
struct InFlight {
    conn: Option<Object>,
    cancel: Option<CancelToken>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let (Some(cancel), Some(conn)) = (self.cancel.take(), self.conn.take()) else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(clean_up(cancel, conn));
            }
            // No runtime to send the cancel from: close the connection rather than hand a
            // busy one back to the pool.
            Err(_) => drop(Object::take(conn)),
        }
    }
}

/// Stop the server's work on `conn` and make the connection idle again, or discard it.
async fn clean_up(cancel: CancelToken, conn: Object) {
    if let Err(e) = cancel.cancel_query(NoTls).await {
        tracing::debug!(error = %e, "could not send a cancel request; closing the connection");
        drop(Object::take(conn));
        return;
    }
    // A transaction dropped mid-statement has queued a ROLLBACK already. One more settles the
    // connection either way; the cancel may land on one of them, hence the retries.
    for _ in 0..3 {
        let rollback = tokio::time::timeout(DEFAULT_CANCEL_GRACE, conn.batch_execute("ROLLBACK"));
        if let Ok(Ok(())) = rollback.await {
            return; // idle again: back to the pool
        }
    }
    drop(Object::take(conn));
}

/// Run `work` in a transaction under a statement timeout of `timeout`, racing the budget.
/// Returns the result and whether the connection was left idle.
async fn run<T, F>(
    client: &mut deadpool_postgres::ClientWrapper,
    budget: &RequestBudget,
    timeout: Duration,
    work: F,
    grace: Duration,
) -> (Result<T, QueryError>, bool)
where
    F: AsyncFnOnce(&Transaction<'_>) -> Result<T, tokio_postgres::Error>,
{
    let cancel = client.cancel_token();
    // Whole milliseconds, rounded down (C2); zero would mean "no timeout" to the server, and
    // admission already refused a forward budget below the cost, so at least 1 ms is left.
    let set_timeout = format!(
        "SET LOCAL statement_timeout = {}",
        timeout.as_millis().max(1)
    );
    let statements = async {
        let tx = client.transaction().await?;
        tx.batch_execute(&set_timeout).await?;
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
            Ok(out) => (out, true),
            Err(e) => (Err(classify(e, budget)), true),
        },
        cause = budget.done() => {
            // The budget ended before the server answered: stop the server's work too, and
            // wait for it to say so, so the connection is idle when it goes back to the pool.
            let sent = cancel.cancel_query(NoTls).await.is_ok();
            let settled = sent
                && tokio::time::timeout(grace, &mut statements).await.is_ok();
            (Err(BudgetError::from(cause).into()), settled)
        }
    }
}

/// A database error, unless it is the server's statement timeout or our own cancel (C4, C5).
fn classify(e: tokio_postgres::Error, budget: &RequestBudget) -> QueryError {
    if e.code() == Some(&SqlState::QUERY_CANCELED) {
        if let Some(cause) = budget.end_cause() {
            return BudgetError::from(cause).into();
        }
        // The server's own statement timeout, set from the forward budget above. The text
        // tells it from an operator's pg_cancel_backend (which stays a database error).
        let timed_out = e
            .as_db_error()
            .is_some_and(|db| db.message().contains("statement timeout"));
        if timed_out {
            return BudgetError::Expired.into();
        }
    }
    QueryError::Db(e)
}
