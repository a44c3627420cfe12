//! What an answer states, read the same way by every layer that reads one (rules
//! [C4](crate::contract#c4), [C10](crate::contract#c10), [C17](crate::contract#c17)): the
//! client layers reading a downstream's reply, and the server layers reading their own
//! handler's answer. The same answer never means two things in two places.
//!
//! Two steps, in this order:
//!
//! 1. **The marker** ([`marker`](super::marker)). `x-deadline-outcome` (`refused`, `expired`,
//!    `cancelled`, `malformed`) is on every answer a hopbudget layer makes, and it names the
//!    outcome under *any* status map (a profile may spell expiry UNAVAILABLE, or refusal 504).
//!    `malformed` says the callee could not read our deadline header: an error, but not a
//!    deadline outcome.
//! 2. **The code**, for answers without a marker. HTTP: the caller's status map (a bare 504 is
//!    expiry, 499 cancellation; a 503 is a refusal only with `x-deadline-required-ms`). gRPC:
//!    the codes as the gRPC spec defines them (DEADLINE_EXCEEDED, CANCELLED), because a peer
//!    that does not mark its answers is not a hopbudget service and does not speak our map.
//!
//! A third step needs the caller's budget and lives with the client layers
//! (`hop::outbound::reply::settle`, the late cancel).

use http::{HeaderMap, HeaderName};

use super::marker::{self, Marker};
use crate::outcome::Outcome;
use crate::status::{GrpcCode, HttpStatusMap};

/// Steps 1 and 2 for an HTTP answer.
pub(crate) fn http_outcome(map: &HttpStatusMap, status: u16, headers: &HeaderMap) -> Outcome {
    match marker::read(headers) {
        Some(Marker::Stated(outcome)) => outcome,
        Some(Marker::Malformed) => Outcome::Completed,
        None => match map.classify(status) {
            // An overload 503 without the requirement is not a deadline refusal.
            Outcome::Refused
                if marker::small_map_get(headers, &marker::REQUIRED_HEADER).is_none() =>
            {
                Outcome::Completed
            }
            outcome => outcome,
        },
    }
}

/// Steps 1 and 2 for a gRPC status `code` with its marker. OK is completed whatever its
/// metadata says.
pub(crate) fn grpc_code_outcome(code: i32, marker: Option<Marker>) -> Outcome {
    if code == GrpcCode::Ok.as_i32() {
        return Outcome::Completed;
    }
    match marker {
        Some(Marker::Stated(outcome)) => outcome,
        Some(Marker::Malformed) => Outcome::Completed,
        None if code == GrpcCode::DeadlineExceeded.as_i32() => Outcome::Expired,
        None if code == GrpcCode::Cancelled.as_i32() => Outcome::Cancelled,
        None => Outcome::Completed,
    }
}

/// Steps 1 and 2 for the `grpc-status` in a header or trailer map; `None` when the map holds
/// no status (the headers of an answer whose status comes in its trailers).
pub(crate) fn grpc_outcome(headers: &HeaderMap) -> Option<Outcome> {
    let code = grpc_status_of(headers)?;
    Some(grpc_code_outcome(code, marker::read(headers)))
}

/// Read `grpc-status` from a header or trailer map.
pub(crate) fn grpc_status_of(headers: &HeaderMap) -> Option<i32> {
    // A `HeaderName` made once: looking up by `&str` parses and validates the name on every
    // call, and this runs on every answer of every hop.
    static GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
    let v = headers.get(&GRPC_STATUS)?;
    std::str::from_utf8(v.as_bytes()).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn marked(value: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-deadline-outcome", HeaderValue::from_static(value));
        h
    }

    #[test]
    fn the_marker_names_the_outcome_under_any_code() {
        // A profile that spells expiry UNAVAILABLE (14), or cancellation ABORTED (10).
        assert_eq!(
            grpc_code_outcome(14, marker::read(&marked("expired"))),
            Outcome::Expired
        );
        assert_eq!(
            grpc_code_outcome(10, marker::read(&marked("cancelled"))),
            Outcome::Cancelled
        );
        assert_eq!(
            http_outcome(&HttpStatusMap::default(), 502, &marked("expired")),
            Outcome::Expired
        );
        // Malformed is an error, not a deadline outcome, whatever code it shares.
        assert_eq!(
            grpc_code_outcome(4, marker::read(&marked("malformed"))),
            Outcome::Completed
        );
        assert_eq!(
            http_outcome(&HttpStatusMap::default(), 504, &marked("malformed")),
            Outcome::Completed
        );
        // OK is OK; an unmarked foreign UNAVAILABLE is the application's.
        assert_eq!(
            grpc_code_outcome(0, marker::read(&marked("expired"))),
            Outcome::Completed
        );
        assert_eq!(grpc_code_outcome(14, None), Outcome::Completed);
        assert_eq!(grpc_code_outcome(4, None), Outcome::Expired);
        assert_eq!(grpc_code_outcome(1, None), Outcome::Cancelled);
    }
}
