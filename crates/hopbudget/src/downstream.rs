//! [`DownstreamError`]: one error type for a failed call to the next hop, whichever client
//! made it (rules C4, C10, C11). The conversions are documented on the type, since this module
//! is private and the type is re-exported at the crate root.

use std::error::Error as StdError;
use std::fmt;

use crate::BudgetError;

type BoxError = Box<dyn StdError + Send + Sync>;

/// A failed call to the next hop: a deadline outcome, a downstream gRPC status, or a transport
/// failure. A handler of either protocol returns it with `?`, and the deadline outcome inside
/// keeps its meaning across a protocol shim (rules C4, C10, C11), so an HTTP handler calling
/// gRPC, or a gRPC handler calling HTTP, needs no hand-written error mapping.
///
/// - From a tonic call: `From<tonic::Status>` (feature `grpc`).
/// - From a reqwest call through `BudgetMiddleware`: `From<reqwest_middleware::Error>`, and
///   `From<reqwest::Error>` for reading the answer's body (feature `reqwest`).
/// - From a tower client such as `ClientBudgetLayer`: `From<tower::BoxError>`.
/// - As an axum answer (feature `axum`): a deadline outcome is answered as [`BudgetError`]'s
///   own response (504, 503 + `Retry-After: 0`, 499, with `x-deadline-outcome`); any other
///   failure is 502 Bad Gateway with the error's message.
/// - As a gRPC answer (feature `grpc`): `From<DownstreamError> for tonic::Status` spells a
///   deadline outcome as `From<BudgetError>` does, passes a downstream's own status through
///   unchanged, and reports any other failure as UNAVAILABLE.
///
/// The runnable `examples/shim.rs` uses it in both directions.
///
/// # Examples
///
/// ```
/// use hopbudget::{BudgetError, DownstreamError};
///
/// let err = DownstreamError::from(BudgetError::Expired);
/// assert_eq!(err.budget_error(), Some(&BudgetError::Expired));
/// assert_eq!(err.to_string(), "deadline expired");
///
///
/// // A tonic call's status (feature `grpc`): a deadline outcome keeps its meaning, others
/// // stay as they are.
/// # #[cfg(feature = "grpc")] {
/// let err = DownstreamError::from(tonic::Status::deadline_exceeded("late"));
/// assert_eq!(err.budget_error(), Some(&BudgetError::Expired));
/// let err = DownstreamError::from(tonic::Status::not_found("no such order"));
/// assert_eq!(err.grpc_status().map(|s| s.code()), Some(tonic::Code::NotFound));
/// assert_eq!(tonic::Status::from(err).code(), tonic::Code::NotFound);
/// # }
/// ```
#[derive(Debug)]
pub struct DownstreamError {
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Budget(BudgetError),
    #[cfg(feature = "grpc")]
    Grpc(tonic::Status),
    Other(BoxError),
}

impl DownstreamError {
    /// The deadline outcome this failure is, if it is one.
    ///
    /// See the [example](Self#examples).
    pub fn budget_error(&self) -> Option<&BudgetError> {
        match &self.kind {
            Kind::Budget(e) => Some(e),
            _ => None,
        }
    }

    /// The downstream's own gRPC status, when it answered one that is not a deadline outcome.
    ///
    /// See the [example](Self#examples).
    #[cfg(feature = "grpc")]
    pub fn grpc_status(&self) -> Option<&tonic::Status> {
        match &self.kind {
            Kind::Grpc(s) => Some(s),
            _ => None,
        }
    }
}

impl fmt::Display for DownstreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Budget(e) => e.fmt(f),
            #[cfg(feature = "grpc")]
            Kind::Grpc(s) => write!(f, "downstream answered {:?}: {}", s.code(), s.message()),
            Kind::Other(e) => write!(f, "downstream call failed: {e}"),
        }
    }
}

impl StdError for DownstreamError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match &self.kind {
            Kind::Budget(e) => Some(e),
            #[cfg(feature = "grpc")]
            Kind::Grpc(s) => Some(s),
            Kind::Other(e) => Some(e.as_ref()),
        }
    }
}

impl From<BudgetError> for DownstreamError {
    fn from(e: BudgetError) -> Self {
        Self {
            kind: Kind::Budget(e),
        }
    }
}

impl From<BoxError> for DownstreamError {
    /// A `tower::BoxError` from a client layer: the [`BudgetError`] anywhere in its chain
    /// ([`BudgetError::find`]) if there is one, else a transport failure.
    fn from(e: BoxError) -> Self {
        let kind = match BudgetError::find(e.as_ref()) {
            Some(b) => Kind::Budget(*b),
            None => Kind::Other(e),
        };
        Self { kind }
    }
}

#[cfg(feature = "reqwest")]
impl From<reqwest_middleware::Error> for DownstreamError {
    /// A reqwest call's error: the deadline outcome [`BudgetMiddleware`] reported
    /// ([`BudgetError::find`]), else a transport failure.
    ///
    /// [`BudgetMiddleware`]: crate::http::reqwest::BudgetMiddleware
    fn from(e: reqwest_middleware::Error) -> Self {
        let kind = match BudgetError::find(&e) {
            Some(b) => Kind::Budget(*b),
            None => Kind::Other(Box::new(e)),
        };
        Self { kind }
    }
}

#[cfg(feature = "reqwest")]
impl From<reqwest::Error> for DownstreamError {
    /// A plain reqwest error, such as reading a body with `text()` after a call went through
    /// the middleware: a transport failure, unless a [`BudgetError`] is in its chain.
    fn from(e: reqwest::Error) -> Self {
        let kind = match BudgetError::find(&e) {
            Some(b) => Kind::Budget(*b),
            None => Kind::Other(Box::new(e)),
        };
        Self { kind }
    }
}

#[cfg(feature = "grpc")]
impl From<tonic::Status> for DownstreamError {
    /// A tonic call's status: the deadline outcome it stands for
    /// ([`BudgetError::from_grpc`]), else the downstream's own answer.
    fn from(status: tonic::Status) -> Self {
        let kind = match BudgetError::try_from(status) {
            Ok(b) => Kind::Budget(b),
            Err(status) => Kind::Grpc(status),
        };
        Self { kind }
    }
}

#[cfg(feature = "grpc")]
impl From<DownstreamError> for tonic::Status {
    /// A deadline outcome as `From<BudgetError>` spells it, a downstream status unchanged, any
    /// other failure as UNAVAILABLE with its message.
    fn from(e: DownstreamError) -> Self {
        match e.kind {
            Kind::Budget(b) => tonic::Status::from(b),
            Kind::Grpc(s) => s,
            Kind::Other(other) => {
                tonic::Status::unavailable(format!("downstream call failed: {other}"))
            }
        }
    }
}

#[cfg(feature = "axum")]
impl axum::response::IntoResponse for DownstreamError {
    /// A deadline outcome is answered as [`BudgetError`]'s response; anything else is
    /// 502 Bad Gateway with the message.
    fn into_response(self) -> axum::response::Response {
        match self.kind {
            Kind::Budget(b) => b.into_response(),
            _ => (http::StatusCode::BAD_GATEWAY, format!("{self}\n")).into_response(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_boxed_client_error_is_searched_for_the_deadline_outcome() {
        let boxed: BoxError = Box::new(BudgetError::Cancelled);
        let e = DownstreamError::from(boxed);
        assert_eq!(e.budget_error(), Some(&BudgetError::Cancelled));
        let boxed: BoxError = "connection refused".into();
        let e = DownstreamError::from(boxed);
        assert_eq!(e.budget_error(), None);
        assert_eq!(e.to_string(), "downstream call failed: connection refused");
    }

    #[cfg(feature = "grpc")]
    #[test]
    fn grpc_statuses_pass_through_and_deadline_statuses_keep_their_meaning() {
        let e = DownstreamError::from(tonic::Status::deadline_exceeded("late"));
        assert_eq!(e.budget_error(), Some(&BudgetError::Expired));
        assert_eq!(tonic::Status::from(e).code(), tonic::Code::DeadlineExceeded);

        let e = DownstreamError::from(tonic::Status::not_found("no such order"));
        assert_eq!(
            e.grpc_status().map(tonic::Status::code),
            Some(tonic::Code::NotFound)
        );
        let back = tonic::Status::from(e);
        assert_eq!(
            (back.code(), back.message()),
            (tonic::Code::NotFound, "no such order")
        );
    }

    #[cfg(feature = "axum")]
    #[test]
    fn as_an_http_answer_a_deadline_outcome_keeps_its_code_and_others_are_502() {
        use axum::response::IntoResponse;
        let res = DownstreamError::from(BudgetError::Expired).into_response();
        assert_eq!(res.status(), 504);
        assert_eq!(res.headers()["x-deadline-outcome"], "expired");
        let boxed: BoxError = "connection refused".into();
        let res = DownstreamError::from(boxed).into_response();
        assert_eq!(res.status(), 502);
        assert!(!res.headers().contains_key("x-deadline-outcome"));
    }
}
