//! One reading of a downstream's answer, for every client layer (rules [C4](crate::contract#c4), [C10](crate::contract#c10)): the HTTP
//! tower layer, the reqwest middleware and the gRPC client layer all ask this module what an
//! answer stated, so the same answer never means two things in two clients.
//!
//! Three steps, in this order:
//!
//! 1. **The marker.** `x-deadline-outcome` (`refused`, `expired`, `cancelled`, `malformed`) is
//!    on every answer a hopbudget layer makes, and it names the outcome under *any* status map
//!    (a profile may spell expiry UNAVAILABLE, or refusal 504). `malformed` says the callee
//!    could not read our deadline header: an error, but not a deadline outcome.
//! 2. **The code**, for answers without a marker. HTTP: the caller's status map (a bare 504 is
//!    expiry, 499 cancellation; a 503 is a refusal only with `x-deadline-required-ms`). gRPC:
//!    the codes as the gRPC spec defines them (DEADLINE_EXCEEDED, CANCELLED), because a peer
//!    that does not mark its answers is not a hopbudget service and does not speak our map.
//! 3. **The late cancel** ([`settle`]): a `cancelled` answer that arrives once the deadline the
//!    callee was told has passed (or once the call's own budget expired) is `expired`. The
//!    callee's time was up; what it saw as its caller leaving was the deadline (our wait, a
//!    proxy or tonic's own timer giving up at it). [C4](crate::contract#c4): running out of time is never
//!    cancellation. One rule for both protocols; a `cancelled` that arrives while the callee
//!    still had time stays `cancelled`.

use http::{HeaderMap, HeaderName, HeaderValue};

use crate::error::EndCause;
use crate::status::{GrpcCode, HttpStatusMap, Outcome};
use crate::{Deadline, RequestBudget};

/// What an answer's `x-deadline-outcome` marker names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Marker {
    /// `refused`, `expired` or `cancelled`.
    Stated(Outcome),
    /// `malformed`: the callee could not read the deadline header it was sent.
    Malformed,
}

/// The marker spelled by `value`, if it is one of ours.
pub(crate) fn parse_marker(value: &[u8]) -> Option<Marker> {
    Some(match value {
        b"refused" => Marker::Stated(Outcome::Refused),
        b"expired" => Marker::Stated(Outcome::Expired),
        b"cancelled" => Marker::Stated(Outcome::Cancelled),
        b"malformed" => Marker::Malformed,
        _ => return None,
    })
}

/// The marker in a header (or trailer) map.
pub(crate) fn marker(headers: &HeaderMap) -> Option<Marker> {
    parse_marker(small_map_get(headers, &crate::http_answer::OUTCOME_HEADER)?.as_bytes())
}

/// Steps 1 and 2 for an HTTP answer.
pub(crate) fn http_outcome(map: &HttpStatusMap, status: u16, headers: &HeaderMap) -> Outcome {
    match marker(headers) {
        Some(Marker::Stated(outcome)) => outcome,
        Some(Marker::Malformed) => Outcome::Completed,
        None => match map.classify(status) {
            // An overload 503 without the requirement is not a deadline refusal.
            Outcome::Refused if !headers.contains_key(&crate::http_answer::REQUIRED_HEADER) => {
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
    Some(grpc_code_outcome(code, marker(headers)))
}

/// Read `grpc-status` from a header or trailer map.
pub(crate) fn grpc_status_of(headers: &HeaderMap) -> Option<i32> {
    // A `HeaderName` made once: looking up by `&str` parses and validates the name on every
    // call, and this runs on every answer of every hop.
    static GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
    let v = headers.get(&GRPC_STATUS)?;
    std::str::from_utf8(v.as_bytes()).ok()?.trim().parse().ok()
}

/// Step 3, the late cancel: `stated` as this hop reports it, for a call whose callee was told
/// `told` and which runs under `budget`.
pub(crate) fn settle(stated: Outcome, told: Deadline, budget: &RequestBudget) -> Outcome {
    match stated {
        Outcome::Cancelled
            if told.is_expired() || budget.end_cause() == Some(EndCause::Expired) =>
        {
            Outcome::Expired
        }
        outcome => outcome,
    }
}

/// `headers.get(name)`, by walking a small map instead of hashing the name: every answer is
/// classified, most carry a handful of headers, and hashing an 18-byte custom name costs more
/// than comparing it with each of them.
pub(crate) fn small_map_get<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
) -> Option<&'a HeaderValue> {
    const SCAN_BELOW: usize = 8;
    if headers.len() <= SCAN_BELOW {
        headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    } else {
        headers.get(name)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::HopPolicy;

    fn marked(value: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-deadline-outcome", HeaderValue::from_static(value));
        h
    }

    #[test]
    fn the_marker_names_the_outcome_under_any_code() {
        // A profile that spells expiry UNAVAILABLE (14), or cancellation ABORTED (10).
        assert_eq!(
            grpc_code_outcome(14, marker(&marked("expired"))),
            Outcome::Expired
        );
        assert_eq!(
            grpc_code_outcome(10, marker(&marked("cancelled"))),
            Outcome::Cancelled
        );
        assert_eq!(
            http_outcome(&HttpStatusMap::default(), 502, &marked("expired")),
            Outcome::Expired
        );
        // Malformed is an error, not a deadline outcome, whatever code it shares.
        assert_eq!(
            grpc_code_outcome(4, marker(&marked("malformed"))),
            Outcome::Completed
        );
        assert_eq!(
            http_outcome(&HttpStatusMap::default(), 504, &marked("malformed")),
            Outcome::Completed
        );
        // OK is OK; an unmarked foreign UNAVAILABLE is the application's.
        assert_eq!(
            grpc_code_outcome(0, marker(&marked("expired"))),
            Outcome::Completed
        );
        assert_eq!(grpc_code_outcome(14, None), Outcome::Completed);
        assert_eq!(grpc_code_outcome(4, None), Outcome::Expired);
        assert_eq!(grpc_code_outcome(1, None), Outcome::Cancelled);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancel_after_the_callees_deadline_is_expiry() {
        let budget = RequestBudget::local(Duration::from_millis(100), HopPolicy::DEFAULT);
        let told = Deadline::after(Duration::from_millis(94));
        assert_eq!(
            settle(Outcome::Cancelled, told, &budget),
            Outcome::Cancelled
        );
        tokio::time::advance(Duration::from_millis(94)).await;
        assert_eq!(settle(Outcome::Cancelled, told, &budget), Outcome::Expired);
        assert_eq!(settle(Outcome::Refused, told, &budget), Outcome::Refused);
    }
}
