//! One spelling of a [`BudgetError`] as an HTTP answer, shared by everything that makes one:
//! the server layer's own refusals and expiries, the admission layer's refusals and
//! [`http::budget_response`](crate::http::budget_response) for handlers. An upstream hopbudget
//! client then classifies all of them alike (rules C3, C10, C17).

use http::{HeaderName, HeaderValue, Response, StatusCode};

use crate::BudgetError;
use crate::codec::millis;
use crate::status::{
    HttpStatusMap, OUTCOME_METADATA, Outcome, REMAINING_MS_HEADER, REQUIRED_MS_HEADER,
};

/// `x-deadline-outcome`: the outcome an answer names.
pub(crate) static OUTCOME_HEADER: HeaderName = HeaderName::from_static(OUTCOME_METADATA);
/// `x-deadline-required-ms` on a refusal.
pub(crate) static REQUIRED_HEADER: HeaderName = HeaderName::from_static(REQUIRED_MS_HEADER);
/// `x-deadline-remaining-ms` on a refusal.
pub(crate) static REMAINING_HEADER: HeaderName = HeaderName::from_static(REMAINING_MS_HEADER);

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
    headers.insert(
        OUTCOME_HEADER.clone(),
        HeaderValue::from_static(outcome.as_str()),
    );
    if let BudgetError::Refused(r) = err {
        headers.insert(http::header::RETRY_AFTER, HeaderValue::from_static("0"));
        headers.insert(
            REQUIRED_HEADER.clone(),
            millis::encode(r.required()).to_header_value(),
        );
        headers.insert(
            REMAINING_HEADER.clone(),
            millis::encode(r.remaining()).to_header_value(),
        );
    }
    res
}
