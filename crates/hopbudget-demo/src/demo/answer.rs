//! How a service answers a hop error on the wire, spelled by its profile (C10): a gRPC
//! status, or an HTTP response with the deadline headers a hopbudget server sends.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use hopbudget::SharedProfile;

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
    match e {
        // The library's spelling: the profile's code, the outcome marker and, for a refusal,
        // `Retry-After` and the required and remaining budget (C3, C10).
        HopError::Budget(b) => {
            hopbudget::http::budget_response(b, &map).map(axum::body::Body::from)
        }
        HopError::TimedOut => (StatusCode::GATEWAY_TIMEOUT, "timeout").into_response(),
        HopError::Malformed(m) => (StatusCode::BAD_REQUEST, m.clone()).into_response(),
        HopError::Failed(m) => (StatusCode::BAD_GATEWAY, m.clone()).into_response(),
    }
}
