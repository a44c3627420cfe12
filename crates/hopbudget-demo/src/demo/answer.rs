//! How a service answers a hop error on the wire, spelled by its profile (C10): a gRPC
//! status, or an HTTP response with the deadline headers a hopbudget server sends.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use hopbudget::status::{OUTCOME_METADATA, REMAINING_MS_HEADER, REQUIRED_MS_HEADER};
use hopbudget::{BudgetError, Outcome, SharedProfile};

use super::hop_error::HopError;

/// The gRPC status for a hop error, spelled by the service's `profile` (C10) through the
/// library's `hopbudget::grpc::budget_status`.
pub fn grpc_status(profile: &SharedProfile, e: &HopError) -> tonic::Status {
    match e {
        HopError::Budget(b) => hopbudget::grpc::budget_status(b, profile.current().grpc_status()),
        // A service without hopbudget spells its own timeout plainly, with no marker.
        HopError::TimedOut => tonic::Status::deadline_exceeded("timeout"),
        HopError::Malformed(m) => tonic::Status::invalid_argument(m.clone()),
        HopError::Failed(m) => tonic::Status::unavailable(m.clone()),
    }
}

/// The HTTP response for a hop error, spelled by the service's `profile` (C10).
pub fn http_response(profile: &SharedProfile, e: &HopError) -> Response {
    let map = *profile.current().http_status();
    let status = |o: Outcome, fallback: u16| {
        StatusCode::from_u16(map.for_outcome(o).unwrap_or(fallback))
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    };
    match e {
        HopError::Budget(BudgetError::Refused(r)) => {
            let mut resp = (status(Outcome::Refused, 503), "refused before start").into_response();
            let h = resp.headers_mut();
            h.insert("retry-after", HeaderValue::from_static("0"));
            h.insert(OUTCOME_METADATA, HeaderValue::from_static("refused"));
            h.insert(
                REQUIRED_MS_HEADER,
                HeaderValue::from(r.required().as_millis() as u64),
            );
            h.insert(
                REMAINING_MS_HEADER,
                HeaderValue::from(r.remaining().as_millis() as u64),
            );
            resp
        }
        HopError::Budget(b) => {
            let o = b.outcome();
            let mut resp = (status(o, 504), b.to_string()).into_response();
            resp.headers_mut()
                .insert(OUTCOME_METADATA, HeaderValue::from_static(o.as_str()));
            resp
        }
        HopError::TimedOut => (StatusCode::GATEWAY_TIMEOUT, "timeout").into_response(),
        HopError::Malformed(m) => (StatusCode::BAD_REQUEST, m.clone()).into_response(),
        HopError::Failed(m) => (StatusCode::BAD_GATEWAY, m.clone()).into_response(),
    }
}
