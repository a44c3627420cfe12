//! A [`BudgetError`] spelled as an HTTP answer, the same way the server layer spells the
//! answers it makes itself, so that an upstream hopbudget client classifies a handler's own
//! refusal or expiry exactly as it would the layer's (rules [C3](crate::contract#c3), [C4](crate::contract#c4), [C10](crate::contract#c10), [C17](crate::contract#c17)).
//!
//! The status code comes from an [`HttpStatusMap`]. A `BudgetError` carries no profile and
//! axum's `IntoResponse` sees no request, so `impl IntoResponse for BudgetError` (feature
//! `axum`) uses the contract's default map (503, 504, 499); every answer also names its
//! outcome in `x-deadline-outcome`, which hopbudget clients read before the code, so callers
//! classify it correctly whatever codes their own profiles use. A service whose profile
//! changes the codes answers with [`budget_response`] and `profile.http_status()` instead.

use bytes::Bytes;
use http::Response;

use crate::BudgetError;
use crate::status::HttpStatusMap;

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
pub fn budget_response(err: &BudgetError, map: &HttpStatusMap) -> Response<Bytes> {
    crate::http_answer::http_answer(err, map)
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::hop::outbound::classify;
    use crate::{Outcome, Refused};

    fn read_back(res: &Response<Bytes>, map: &HttpStatusMap) -> Outcome {
        classify(map, res.status().as_u16(), res.headers())
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
        use crate::DownstreamError;
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
        use crate::DownstreamError;
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
