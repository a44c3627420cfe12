//! The answers the layer makes itself, in the profile's spelling: refused, expired and
//! malformed (C3, C4, C9, C10).

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};

use crate::BudgetError;
use crate::codec::MalformedHeader;
use crate::status::HttpStatusMap;

/// A plain-text response with a status from the profile. The profile validates its codes, so
/// the fallback to 500 only guards against a hand-built invalid map.
fn plain(code: u16, text: String) -> Response<Bytes> {
    let mut res = Response::new(Bytes::from(text));
    *res.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    res.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    res
}

/// The 400 (or the profile's code) for a deadline header that does not parse (C9).
pub(super) fn malformed_response(
    status: &HttpStatusMap,
    malformed: &MalformedHeader,
) -> Response<Bytes> {
    // C9: a clear client error, never "no deadline".
    let mut res = plain(status.malformed, malformed.to_string());
    res.headers_mut().insert(
        super::super::OUTCOME_HEADER.clone(),
        HeaderValue::from_static("malformed"),
    );
    res
}

/// The layer's own 504 (or the profile's expiry code): the deadline passed first (C4, C7).
pub(super) fn expired_response(status: &HttpStatusMap) -> Response<Bytes> {
    crate::answer::http_answer(&BudgetError::Expired, status)
}

/// The layer's own refusal before any work (C3): 503 with `Retry-After: 0` and the required
/// and remaining budget (C10).
pub(super) fn refused_response(
    status: &HttpStatusMap,
    required: std::time::Duration,
    remaining: std::time::Duration,
) -> Response<Bytes> {
    let refused = BudgetError::Refused(crate::Refused::new(required, remaining));
    crate::answer::http_answer(&refused, status)
}
