//! The one spelling of a deadline answer over HTTP, shared by everything that makes one: the
//! server layer's own refusals, expiries and malformed-header answers, the admission layer's
//! refusals and `http::budget_response` for handlers. An upstream hopbudget client then
//! classifies all of them alike (rules [C3](crate::contract#c3), [C9](crate::contract#c9), [C10](crate::contract#c10), [C17](crate::contract#c17)). Protocol-neutral in its
//! dependencies (the `http` crate only), so the core's admission layer spells with it too.

use http::{HeaderValue, Response, StatusCode};

use crate::BudgetError;
use crate::codec::MalformedHeader;
use crate::codec::marker::{self, Marker};
use crate::status::{HttpStatusMap, Outcome};

/// The answer for `err`: the status `map` gives its outcome, a one-line plain-text body, the
/// outcome header; a refusal adds `Retry-After: 0` and the required and remaining budget.
pub(crate) fn http_answer<B: From<String>>(err: &BudgetError, map: &HttpStatusMap) -> Response<B> {
    let outcome = err.outcome();
    debug_assert_ne!(outcome, Outcome::Completed);
    // A profile validates its codes; the fallback only guards a hand-built invalid map.
    let code = map
        .for_outcome(outcome)
        .and_then(|c| StatusCode::from_u16(c).ok())
        .unwrap_or(StatusCode::GATEWAY_TIMEOUT);
    let mut res = Response::new(B::from(format!("{err}\n")));
    *res.status_mut() = code;
    let headers = res.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if let BudgetError::Refused(r) = err {
        headers.insert(http::header::RETRY_AFTER, HeaderValue::from_static("0"));
        marker::mark_refusal(headers, r);
    } else {
        marker::mark(headers, Marker::Stated(outcome));
    }
    res
}

/// The 400 (or the profile's code) for a deadline header that does not parse ([C9](crate::contract#c9)): a clear
/// client error naming the header, never "no deadline".
pub(crate) fn malformed_answer<B: From<String>>(
    map: &HttpStatusMap,
    malformed: &MalformedHeader,
) -> Response<B> {
    // The profile validates its codes; the fallback only guards a hand-built invalid map.
    let code = StatusCode::from_u16(map.malformed).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut res = Response::new(B::from(malformed.to_string()));
    *res.status_mut() = code;
    let headers = res.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    marker::mark(headers, Marker::Malformed);
    res
}
