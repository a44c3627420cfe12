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
///   own response (504, 503 + `Retry-After: 0`, 499, with `x-deadline-outcome`); a
///   downstream's own answer keeps its meaning (an HTTP status as it was, a gRPC status by
///   the usual mapping: NOT_FOUND is 404, INVALID_ARGUMENT 400, UNAVAILABLE 503, ...); a
///   transport failure is 502 Bad Gateway with the error's message.
/// - As a gRPC answer (feature `grpc`): `From<DownstreamError> for tonic::Status` spells a
///   deadline outcome as `From<BudgetError>` does, passes a downstream's own status through
///   unchanged (an HTTP status by the same mapping: 404 is NOT_FOUND), and reports a
///   transport failure as UNAVAILABLE.
///
/// A downstream HTTP answer that is not a success becomes a `DownstreamError` through
/// reqwest's `error_for_status()`: a 404 below is a 404 above, not a 502.
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
    /// A downstream HTTP answer that was not a success (reqwest's `error_for_status`).
    #[cfg_attr(not(feature = "reqwest"), allow(dead_code))]
    Http(http::StatusCode, String),
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

    /// The downstream's own HTTP status, when it answered one that is not a success and not
    /// a deadline outcome.
    ///
    /// See the [example](Self#examples).
    pub fn http_status(&self) -> Option<http::StatusCode> {
        match &self.kind {
            Kind::Http(code, _) => Some(*code),
            _ => None,
        }
    }
}

/// The HTTP status for a downstream's gRPC code, as Google's API design and grpc-gateway map
/// them (a shim answers what the service below meant, not 502).
#[cfg(all(feature = "grpc", feature = "axum"))]
fn http_of_grpc(code: tonic::Code) -> http::StatusCode {
    use http::StatusCode as H;
    use tonic::Code as G;
    match code {
        G::Ok => H::OK,
        G::Cancelled => H::from_u16(499).unwrap_or(H::BAD_REQUEST),
        G::InvalidArgument | G::FailedPrecondition | G::OutOfRange => H::BAD_REQUEST,
        G::DeadlineExceeded => H::GATEWAY_TIMEOUT,
        G::NotFound => H::NOT_FOUND,
        G::AlreadyExists | G::Aborted => H::CONFLICT,
        G::PermissionDenied => H::FORBIDDEN,
        G::Unauthenticated => H::UNAUTHORIZED,
        G::ResourceExhausted => H::TOO_MANY_REQUESTS,
        G::Unimplemented => H::NOT_IMPLEMENTED,
        G::Unavailable => H::SERVICE_UNAVAILABLE,
        G::Unknown | G::Internal | G::DataLoss => H::INTERNAL_SERVER_ERROR,
    }
}

/// The gRPC code for a downstream's HTTP status, the same mapping read the other way.
#[cfg(feature = "grpc")]
fn grpc_of_http(status: http::StatusCode) -> tonic::Code {
    use tonic::Code as G;
    match status.as_u16() {
        400 => G::InvalidArgument,
        401 => G::Unauthenticated,
        403 => G::PermissionDenied,
        404 => G::NotFound,
        409 => G::Aborted,
        429 => G::ResourceExhausted,
        501 => G::Unimplemented,
        502 | 503 => G::Unavailable,
        402..=499 => G::FailedPrecondition,
        _ => G::Internal,
    }
}

impl fmt::Display for DownstreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Budget(e) => e.fmt(f),
            #[cfg(feature = "grpc")]
            Kind::Grpc(s) => write!(f, "downstream answered {:?}: {}", s.code(), s.message()),
            Kind::Http(code, message) => write!(f, "downstream answered {code}: {message}"),
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
            Kind::Http(..) => None,
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
        let kind = match (BudgetError::find(&e), e.status()) {
            (Some(b), _) => Kind::Budget(*b),
            // `error_for_status()`: the downstream answered, and its answer keeps its meaning.
            (None, Some(status)) => Kind::Http(status, e.without_url().to_string()),
            (None, None) => Kind::Other(Box::new(e)),
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
            Kind::Http(code, message) => tonic::Status::new(grpc_of_http(code), message),
            Kind::Other(other) => {
                tonic::Status::unavailable(format!("downstream call failed: {other}"))
            }
        }
    }
}

#[cfg(feature = "axum")]
impl axum::response::IntoResponse for DownstreamError {
    /// A deadline outcome is answered as [`BudgetError`]'s response, a downstream's own
    /// status keeps its meaning, and a transport failure is 502 Bad Gateway with the message.
    fn into_response(self) -> axum::response::Response {
        let message = format!("{self}\n");
        match self.kind {
            Kind::Budget(b) => b.into_response(),
            Kind::Http(code, _) => (code, message).into_response(),
            #[cfg(feature = "grpc")]
            Kind::Grpc(s) => (http_of_grpc(s.code()), message).into_response(),
            Kind::Other(_) => (http::StatusCode::BAD_GATEWAY, message).into_response(),
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

    #[cfg(all(feature = "grpc", feature = "axum"))]
    #[test]
    fn a_downstreams_own_status_keeps_its_meaning_in_either_spelling() {
        use axum::response::IntoResponse;
        let res = DownstreamError::from(tonic::Status::not_found("no such order")).into_response();
        assert_eq!(res.status(), 404);
        let res = DownstreamError::from(tonic::Status::invalid_argument("bad")).into_response();
        assert_eq!(res.status(), 400);
        let e = DownstreamError {
            kind: Kind::Http(http::StatusCode::NOT_FOUND, "gone".into()),
        };
        assert_eq!(e.http_status(), Some(http::StatusCode::NOT_FOUND));
        assert_eq!(tonic::Status::from(e).code(), tonic::Code::NotFound);
        for code in [400, 401, 403, 404, 409, 429, 500, 501, 503] {
            let status = http::StatusCode::from_u16(code).unwrap();
            assert_eq!(http_of_grpc(grpc_of_http(status)), status, "{code}");
        }
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
