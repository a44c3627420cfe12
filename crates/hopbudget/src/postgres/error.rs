//! Why a budgeted query did not return rows, and how a driver error is sorted into one of
//! those reasons (rules [C4](crate::contract#c4), [C5](crate::contract#c5)).

use std::fmt;

use deadpool_postgres::PoolError;
use tokio_postgres::error::{DbError, Severity, SqlState};

use crate::budget::RequestBudget;
use crate::error::BudgetError;

/// Why a budgeted query did not return rows.
///
/// See the [example](super::BudgetPool#examples).
#[derive(Debug)]
#[non_exhaustive]
pub enum QueryError {
    /// Refused before start, expired (the server's statement timeout or the deadline), or
    /// cancelled because the caller went away.
    Budget(BudgetError),
    /// The database answered with an error that has nothing to do with the budget.
    Db(tokio_postgres::Error),
    /// The connection died under the query: the server ended the session (an operator's
    /// `pg_terminate_backend`, a shutdown, a crash) or the socket failed. The connection is
    /// discarded, so the pool opens a new one for the next request.
    ConnectionLost(tokio_postgres::Error),
    /// No connection could be made or taken from the pool.
    Pool(PoolError),
    /// The pool could not be built from its settings.
    Config(String),
}

impl QueryError {
    /// The budget error, if that is why the query failed.
    ///
    /// See the [example](super::BudgetPool#examples).
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
            QueryError::Db(e) => write!(f, "database error: {}", Described(e)),
            QueryError::ConnectionLost(e) => {
                write!(f, "database connection lost mid-query: {}", Described(e))
            }
            QueryError::Pool(e) => write!(f, "no database connection: {e}"),
            QueryError::Config(e) => write!(f, "bad connection pool settings: {e}"),
        }
    }
}

impl std::error::Error for QueryError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            QueryError::Budget(e) => Some(e),
            QueryError::Db(e) | QueryError::ConnectionLost(e) => Some(e),
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

/// A driver error in words a person can act on. tokio-postgres's own `Display` says only
/// "db error" and keeps the server's words in its source; a log line usually shows only the
/// top error, so the server's severity, SQLSTATE and message are spelled out here, and an I/O
/// failure names its cause.
struct Described<'a>(&'a tokio_postgres::Error);

impl fmt::Display for Described<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = self.0;
        if let Some(db) = e.as_db_error() {
            return write!(
                f,
                "{} {}: {}",
                db.severity(),
                db.code().code(),
                db.message()
            );
        }
        write!(f, "{e}")?;
        if let Some(cause) = std::error::Error::source(e) {
            write!(f, ": {cause}")?;
        }
        Ok(())
    }
}

/// Sort an error from the statements: our own cancel or the server's statement timeout is a
/// budget outcome ([C4](crate::contract#c4), [C5](crate::contract#c5)), a dead connection is [`QueryError::ConnectionLost`], anything else
/// stays a database error.
pub(super) fn classify(e: tokio_postgres::Error, budget: &RequestBudget) -> QueryError {
    if e.code() == Some(&SqlState::QUERY_CANCELED) {
        if let Some(cause) = budget.end_cause() {
            return BudgetError::from(cause).into();
        }
        // The server's own statement timeout, set from the forward budget. The text tells it
        // from an operator's pg_cancel_backend (which stays a database error).
        let timed_out = e
            .as_db_error()
            .is_some_and(|db| db.message().contains("statement timeout"));
        if timed_out {
            return BudgetError::Expired.into();
        }
    }
    if connection_lost(&e) {
        return QueryError::ConnectionLost(e);
    }
    QueryError::Db(e)
}

/// Whether `e` means the connection cannot be used again: the server ends the session with a
/// FATAL (or PANIC) error before it closes the socket, and tokio-postgres reports a closed
/// connection or a socket error as errors of their own.
fn connection_lost(e: &tokio_postgres::Error) -> bool {
    let fatal = |db: &DbError| {
        matches!(
            db.parsed_severity(),
            Some(Severity::Fatal | Severity::Panic)
        )
    };
    let io = std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>());
    e.is_closed() || e.as_db_error().is_some_and(fatal) || io
}
