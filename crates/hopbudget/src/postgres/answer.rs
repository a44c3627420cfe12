//! A [`QueryError`] answered over gRPC (feature `grpc`) and HTTP (feature `axum`), so a handler
//! can return `pool.query(..).await?` the way it returns a [`BudgetError`].
//!
//! - A budget outcome is the contract's answer, exactly as [`BudgetError`] converts (rules
//!   [C3](crate::contract#c3), [C4](crate::contract#c4), [C5](crate::contract#c5), [C10](crate::contract#c10)): DEADLINE_EXCEEDED or CANCELLED, 503 with the refusal headers, 504, 499,
//!   each marked with its outcome, so the caller classifies it as it would the layer's own.
//! - A database that cannot be reached or that ended the session ([`QueryError::Pool`],
//!   [`QueryError::ConnectionLost`]) is UNAVAILABLE / 503 without the refusal headers: this
//!   service is unable to serve for now, and a caller may try another instance or later.
//! - A database error or bad pool settings ([`QueryError::Db`], [`QueryError::Config`]) is
//!   INTERNAL / 500: the failure is this service's own, not a downstream's (so not 502).
//!
//! The answer names the SQLSTATE but never the server's message: that text can quote rows and
//! constraint values (a duplicate e-mail address, say), which belong in this service's log
//! (the error's `Display`), not in an answer to a caller.

use super::QueryError;
use crate::error::BudgetError;

/// What a caller is told about a failure that is not a budget outcome.
enum Failure {
    /// The database could not be used for now.
    Unavailable(&'static str),
    /// This service's own error.
    Internal(String),
}

impl QueryError {
    /// The budget outcome inside, or how to answer anything else.
    fn answer(self) -> Result<BudgetError, Failure> {
        match self {
            QueryError::Budget(e) => Ok(e),
            QueryError::ConnectionLost(_) => Err(Failure::Unavailable("database connection lost")),
            QueryError::Pool(_) => Err(Failure::Unavailable("database unavailable")),
            QueryError::Db(e) => Err(Failure::Internal(match e.code() {
                Some(code) => format!("database error (SQLSTATE {})", code.code()),
                None => "database error".to_owned(),
            })),
            QueryError::Config(_) => Err(Failure::Internal("database pool misconfigured".into())),
        }
    }
}

#[cfg(feature = "grpc")]
impl From<QueryError> for tonic::Status {
    /// A budget outcome as `From<BudgetError>` spells it; otherwise UNAVAILABLE for a
    /// database out of reach and INTERNAL for a database error (see the module docs).
    fn from(err: QueryError) -> Self {
        match err.answer() {
            Ok(budget) => budget.into(),
            Err(Failure::Unavailable(text)) => tonic::Status::unavailable(text),
            Err(Failure::Internal(text)) => tonic::Status::internal(text),
        }
    }
}

#[cfg(feature = "axum")]
impl axum::response::IntoResponse for QueryError {
    /// A budget outcome as `BudgetError`'s `into_response`; otherwise 503 for a database out
    /// of reach and 500 for a database error (see the module docs).
    fn into_response(self) -> axum::response::Response {
        use http::StatusCode;
        match self.answer() {
            Ok(budget) => budget.into_response(),
            Err(Failure::Unavailable(text)) => {
                (StatusCode::SERVICE_UNAVAILABLE, format!("{text}\n")).into_response()
            }
            Err(Failure::Internal(text)) => {
                (StatusCode::INTERNAL_SERVER_ERROR, format!("{text}\n")).into_response()
            }
        }
    }
}
