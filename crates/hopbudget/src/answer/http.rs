//! The HTTP answer: the one spelling of a deadline outcome over HTTP, shared by everything
//! that makes one: the server layer's own refusals, expiries and malformed-header answers, the
//! admission layer's refusals ([`HttpAnswer`](crate::admission::HttpAnswer)) and, for
//! handlers, `http::budget_response` (feature `http`) and axum's `IntoResponse` for
//! [`BudgetError`] (feature `axum`). An upstream hopbudget client then classifies all of them
//! alike, a handler's own refusal or expiry exactly as the layer's (rules [C3](crate::contract#c3),
//! [C4](crate::contract#c4), [C9](crate::contract#c9), [C10](crate::contract#c10), [C17](crate::contract#c17)).
//! Protocol-neutral in its dependencies (the `http` crate only) and outside the `http` feature,
//! so the core's admission layer spells with it too; only the handler-facing parts need their
//! features.
//!
//! The status code comes from an [`HttpStatusMap`]. A `BudgetError` carries no profile and
//! axum's `IntoResponse` sees no request, so `impl IntoResponse for BudgetError` (feature
//! `axum`) uses the contract's default map (503, 504, 499); every answer also names its
//! outcome in `x-deadline-outcome`, which hopbudget clients read before the code, so callers
//! classify it correctly whatever codes their own profiles use. A service whose profile
//! changes the codes answers with `http::budget_response` and `profile.http_status()` instead.

use http::{HeaderValue, Response, StatusCode};

use crate::codec::MalformedHeader;
use crate::codec::marker::{self, Marker};
use crate::error::BudgetError;
use crate::outcome::Outcome;
use crate::status::HttpStatusMap;

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

/// The HTTP answer for `err`: the status `map` gives its outcome, a one-line plain-text body,
/// and the `x-deadline-outcome` header; a refusal adds `Retry-After: 0`,
/// `x-deadline-required-ms` and `x-deadline-remaining-ms` ([C3](crate::contract#c3)). These are the bytes the server
/// layer sends for its own refusals and expiries, so an upstream hopbudget client classifies a
/// handler's answer exactly as it would the layer's ([C10](crate::contract#c10), [C17](crate::contract#c17)).
///
/// `impl IntoResponse for BudgetError` (feature `axum`) calls this with the contract's default
/// map (503, 504, 499): a `BudgetError` carries no profile and axum's `into_response` sees no
/// request. Because hopbudget clients read `x-deadline-outcome` before the status code, callers
/// classify the answer correctly whatever codes their own profiles use. A service whose profile
/// changes the codes answers with this function and `profile.http_status()` instead.
///
/// ```
/// use std::time::Duration;
/// use hopbudget::{BudgetError, Refused, status::HttpStatusMap};
///
/// let err = BudgetError::Refused(Refused::new(Duration::from_millis(200), Duration::from_millis(120)));
/// let res = hopbudget::http::budget_response(&err, &HttpStatusMap::default());
/// assert_eq!(res.status(), 503);
/// assert_eq!(res.headers()["retry-after"], "0");
/// assert_eq!(res.headers()["x-deadline-outcome"], "refused");
/// assert_eq!(res.headers()["x-deadline-required-ms"], "200");
/// assert_eq!(res.headers()["x-deadline-remaining-ms"], "120");
///
/// let res = hopbudget::http::budget_response(&BudgetError::Expired, &HttpStatusMap::default());
/// assert_eq!(res.status(), 504);
/// ```
#[cfg(feature = "http")]
pub fn budget_response(err: &BudgetError, map: &HttpStatusMap) -> Response<bytes::Bytes> {
    http_answer(err, map)
}

#[cfg(feature = "axum")]
impl axum::response::IntoResponse for BudgetError {
    /// [`budget_response`] with the contract's default status map; see
    /// [`budget_response`] for why, and for answering with a profile's own codes.
    ///
    /// A handler can return `budget.admit(cost)?` straight away; the caller sees the same
    /// refusal the server layer would have sent (runnable: `examples/axum_reqwest.rs`).
    fn into_response(self) -> axum::response::Response {
        budget_response(&self, &HttpStatusMap::default()).map(axum::body::Body::from)
    }
}

#[cfg(feature = "axum")]
impl axum::response::IntoResponse for crate::DownstreamError {
    /// A deadline outcome is answered as [`BudgetError`]'s response, a downstream's own
    /// status keeps its meaning (a gRPC code by the usual mapping: NOT_FOUND is 404), and a
    /// transport failure is 502 Bad Gateway with the message.
    fn into_response(self) -> axum::response::Response {
        match (self.budget_error(), self.http_answer_status()) {
            (Some(budget), _) => budget.into_response(),
            (None, Some(code)) => (code, format!("{self}\n")).into_response(),
            // Every failure that is not a deadline outcome has an answer status.
            (None, None) => (http::StatusCode::BAD_GATEWAY, format!("{self}\n")).into_response(),
        }
    }
}

#[cfg(all(test, feature = "http"))]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;

    use super::*;
    use crate::codec::answer::http_outcome;
    use crate::error::Refused;

    /// Read back as the client layers read every answer (`hop::outbound::classify`).
    fn read_back(res: &Response<Bytes>, map: &HttpStatusMap) -> Outcome {
        http_outcome(map, res.status().as_u16(), res.headers())
    }

    #[test]
    fn every_error_reads_back_as_itself() {
        let map = HttpStatusMap::default();
        let refused = BudgetError::Refused(Refused::new(
            Duration::from_millis(200),
            Duration::from_millis(120),
        ));
        for err in [refused, BudgetError::Expired, BudgetError::Cancelled] {
            let res = budget_response(&err, &map);
            assert_eq!(read_back(&res, &map), err.outcome(), "{err}");
        }
        let res = budget_response(&BudgetError::Cancelled, &map);
        assert_eq!(res.status(), 499);
        assert!(!res.headers().contains_key("retry-after"));
    }

    #[test]
    fn a_profile_map_spells_the_code_and_the_header_still_names_the_outcome() {
        let map = HttpStatusMap {
            expired: 408,
            ..HttpStatusMap::default()
        };
        let res = budget_response(&BudgetError::Expired, &map);
        assert_eq!(res.status(), 408);
        // A client on the default map still reads it as expiry (C10).
        assert_eq!(read_back(&res, &HttpStatusMap::default()), Outcome::Expired);
    }

    #[cfg(all(feature = "grpc", feature = "axum"))]
    #[test]
    fn a_downstreams_own_status_keeps_its_meaning_in_either_spelling() {
        use crate::downstream::DownstreamError;
        use axum::response::IntoResponse;
        let res = DownstreamError::from(tonic::Status::not_found("no such order")).into_response();
        assert_eq!(res.status(), 404);
        let res = DownstreamError::from(tonic::Status::invalid_argument("bad")).into_response();
        assert_eq!(res.status(), 400);
        let e = DownstreamError::http_answer(http::StatusCode::NOT_FOUND, "gone".into());
        assert_eq!(e.http_status(), Some(http::StatusCode::NOT_FOUND));
        assert_eq!(tonic::Status::from(e).code(), tonic::Code::NotFound);
    }

    #[cfg(feature = "axum")]
    #[test]
    fn as_an_http_answer_a_deadline_outcome_keeps_its_code_and_others_are_502() {
        use crate::downstream::DownstreamError;
        use axum::response::IntoResponse;
        let res = DownstreamError::from(BudgetError::Expired).into_response();
        assert_eq!(res.status(), 504);
        assert_eq!(res.headers()["x-deadline-outcome"], "expired");
        let boxed: Box<dyn std::error::Error + Send + Sync> = "connection refused".into();
        let res = DownstreamError::from(boxed).into_response();
        assert_eq!(res.status(), 502);
        assert!(!res.headers().contains_key("x-deadline-outcome"));
    }

    #[cfg(feature = "axum")]
    #[test]
    fn into_response_is_the_default_spelling() {
        use axum::response::IntoResponse;
        let res = BudgetError::Expired.into_response();
        assert_eq!(res.status(), 504);
        assert_eq!(res.headers()["x-deadline-outcome"], "expired");
    }
}
