//! [`DownstreamError`]: one error type for a failed call to the next hop, whichever client
//! made it (rules [C4](crate::contract#c4), [C10](crate::contract#c10), [C11](crate::contract#c11)). The conversions are documented on the type, since this module
//! is private and the type is re-exported at the crate root.
//!
//! The type names no client: a downstream's own answer is kept as its code (an HTTP status,
//! or a gRPC code as the number the gRPC spec gives it) with its text, and each adapter
//! supplies its conversions beside its own code (`grpc/downstream.rs`, `http/reqwest.rs`,
//! `answer/http.rs`); this module builds without any of them.

use std::error::Error as StdError;
use std::fmt;

use crate::error::BudgetError;

type BoxError = Box<dyn StdError + Send + Sync>;

/// A failed call to the next hop: a deadline outcome, a downstream gRPC status, or a transport
/// failure. A handler of either protocol returns it with `?`, and the deadline outcome inside
/// keeps its meaning across a protocol shim (rules [C4](crate::contract#c4), [C10](crate::contract#c10), [C11](crate::contract#c11)), so an HTTP handler calling
/// gRPC, or a gRPC handler calling HTTP, needs no hand-written error mapping.
///
/// - From a deadline outcome: `From<BudgetError>`.
/// - From a tower client such as `ClientBudgetLayer`: `From<tower::BoxError>`, the
///   [`BudgetError`] in its chain if there is one, else a transport failure.
///
/// Each protocol adapter adds its own conversions beside its code, with their docs (listed
/// under this type's trait implementations): a tonic call's status and a tonic handler's
/// answer (`grpc/downstream.rs`), a reqwest call's errors (`http/reqwest.rs`: a downstream
/// HTTP answer that is not a success, through reqwest's `error_for_status()`, is a 404 below
/// and a 404 above, not a 502), an axum handler's answer (`answer/http.rs`). Across the two
/// protocols a downstream's own answer keeps its meaning by the usual mapping (gRPC NOT_FOUND
/// is HTTP 404, INVALID_ARGUMENT 400, UNAVAILABLE 503, ...), and a transport failure is 502
/// Bad Gateway or UNAVAILABLE.
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
/// // From a tower client: the deadline outcome in the error's chain, else a transport failure.
/// let err = DownstreamError::from(tower::BoxError::from("connection refused"));
/// assert_eq!(err.budget_error(), None);
/// assert_eq!(err.to_string(), "downstream call failed: connection refused");
/// ```
///
/// A tonic call's status is shown on [`grpc_status`](Self::grpc_status), in the gRPC adapter.
#[derive(Debug)]
pub struct DownstreamError {
    pub(crate) kind: Kind,
}

/// What the failure is. The core makes the deadline and transport kinds; each adapter makes
/// the downstream answers it can see (a build without it leaves them unmade, which the
/// crate's partial-build allowance covers).
#[derive(Debug)]
pub(crate) enum Kind {
    Budget(BudgetError),
    /// A downstream gRPC status that is not a deadline outcome: its code (as the gRPC spec
    /// numbers it), the line `Display` shows, and the status itself, which the gRPC
    /// integration hands back unchanged (details and metadata included).
    Grpc {
        code: i32,
        shown: String,
        status: BoxError,
    },
    /// A downstream HTTP answer that was not a success (reqwest's `error_for_status`).
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

    /// A downstream's own HTTP answer that is not a success, for the adapter that reads one.
    pub(crate) fn http_answer(code: http::StatusCode, message: String) -> Self {
        Self {
            kind: Kind::Http(code, message),
        }
    }

    /// A call that failed without an answer, for an adapter whose error is not a `BoxError`.
    pub(crate) fn transport(error: BoxError) -> Self {
        Self {
            kind: Kind::Other(error),
        }
    }

    /// The HTTP status that answers this failure from a handler: a downstream's own status
    /// keeps its meaning (a gRPC code by the usual mapping), a transport failure is 502 Bad
    /// Gateway; `None` for a deadline outcome, which is answered as [`BudgetError`] is.
    pub(crate) fn http_answer_status(&self) -> Option<http::StatusCode> {
        match &self.kind {
            Kind::Budget(_) => None,
            Kind::Http(code, _) => Some(*code),
            Kind::Grpc { code, .. } => Some(http_of_grpc(*code)),
            Kind::Other(_) => Some(http::StatusCode::BAD_GATEWAY),
        }
    }
}

/// The HTTP status for a downstream's gRPC code (numbered as the gRPC spec does), as Google's
/// API design and grpc-gateway map them (a shim answers what the service below meant, not 502).
pub(crate) fn http_of_grpc(code: i32) -> http::StatusCode {
    use http::StatusCode as H;
    match code {
        0 => H::OK,
        1 => H::from_u16(499).unwrap_or(H::BAD_REQUEST),
        3 | 9 | 11 => H::BAD_REQUEST,
        4 => H::GATEWAY_TIMEOUT,
        5 => H::NOT_FOUND,
        6 | 10 => H::CONFLICT,
        7 => H::FORBIDDEN,
        16 => H::UNAUTHORIZED,
        8 => H::TOO_MANY_REQUESTS,
        12 => H::NOT_IMPLEMENTED,
        14 => H::SERVICE_UNAVAILABLE,
        _ => H::INTERNAL_SERVER_ERROR,
    }
}

/// The gRPC code (numbered as the gRPC spec does) for a downstream's HTTP status, the same
/// mapping read the other way.
pub(crate) fn grpc_of_http(status: http::StatusCode) -> i32 {
    match status.as_u16() {
        400 => 3,
        401 => 16,
        403 => 7,
        404 => 5,
        409 => 10,
        429 => 8,
        501 => 12,
        502 | 503 => 14,
        402..=499 => 9,
        _ => 13,
    }
}

impl fmt::Display for DownstreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Budget(e) => e.fmt(f),
            Kind::Grpc { shown, .. } => f.write_str(shown),
            Kind::Http(code, message) => write!(f, "downstream answered {code}: {message}"),
            Kind::Other(e) => write!(f, "downstream call failed: {e}"),
        }
    }
}

impl StdError for DownstreamError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match &self.kind {
            Kind::Budget(e) => Some(e),
            Kind::Grpc { status, .. } => Some(status.as_ref()),
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

    #[test]
    fn the_two_code_mappings_read_each_other_back() {
        for code in [400, 401, 403, 404, 409, 429, 500, 501, 503] {
            let status = http::StatusCode::from_u16(code).unwrap();
            assert_eq!(http_of_grpc(grpc_of_http(status)), status, "{code}");
        }
        let e = DownstreamError::http_answer(http::StatusCode::NOT_FOUND, "gone".into());
        assert_eq!(e.http_status(), Some(http::StatusCode::NOT_FOUND));
        assert_eq!(e.http_answer_status(), Some(http::StatusCode::NOT_FOUND));
    }
}
