//! The answers the layer makes itself, in the profile's spelling: refused, expired and
//! malformed (C3, C4, C9, C10).

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};

use crate::codec::{MalformedHeader, millis};
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

pub(super) fn expired_response(status: &HttpStatusMap) -> Response<Bytes> {
    let mut res = plain(status.expired, "deadline expired\n".to_owned());
    res.headers_mut().insert(
        super::super::OUTCOME_HEADER.clone(),
        HeaderValue::from_static("expired"),
    );
    res
}

pub(super) fn refused_response(
    status: &HttpStatusMap,
    required: std::time::Duration,
    remaining: std::time::Duration,
) -> Response<Bytes> {
    let refused = crate::Refused::new(required, remaining);
    let mut res = plain(status.refused, format!("{refused}\n"));
    let headers = res.headers_mut();
    headers.insert(http::header::RETRY_AFTER, HeaderValue::from_static("0"));
    headers.insert(
        super::super::OUTCOME_HEADER.clone(),
        HeaderValue::from_static("refused"),
    );
    headers.insert(
        super::super::REQUIRED_HEADER.clone(),
        millis::encode(required).to_header_value(),
    );
    headers.insert(
        super::super::REMAINING_HEADER.clone(),
        millis::encode(remaining).to_header_value(),
    );
    res
}
