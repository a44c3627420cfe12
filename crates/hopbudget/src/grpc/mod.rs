//! gRPC hops with tonic: a server layer that reads the inbound budget and a client layer that
//! forwards it, so every tonic call carries one shrinking budget (rules C2-C5, [C9](crate::contract#c9), [C11](crate::contract#c11)).
//!
//! tonic on its own reads `grpc-timeout` only to time out its own wait, reports that timeout
//! as CANCELLED, and never forwards the budget to outgoing calls. The two layers here close
//! those gaps:
//!
//! - [`server::GrpcServerLayer`] for `tonic::transport::Server::builder().layer(..)`: reads
//!   `grpc-timeout` and the other carriers the profile enables, refuses below the route's
//!   minimum before the handler runs, installs the [`RequestBudget`](crate::RequestBudget) in
//!   the request extensions and the task-local scope, answers DEADLINE_EXCEEDED on expiry, and
//!   cancels the request's tree when the client resets the stream.
//! - [`client::GrpcClientLayer`] around a `tonic::transport::Channel` (or any tower gRPC
//!   service): stamps `grpc-timeout` from the current budget on every call, refuses locally
//!   without sending a byte, bounds the wait, and reports a CANCELLED that arrives after the
//!   deadline as DEADLINE_EXCEEDED.
//!
//! ## Status spelling
//!
//! Every status these layers produce is a trailers-only gRPC response (HTTP 200 with
//! `grpc-status` and `grpc-message` in the headers), built with `tonic::Status::into_http`,
//! with the codes of the profile's [`GrpcStatusMap`]. Each also carries the
//! [`codec::marker::OUTCOME`](crate::codec::marker::OUTCOME) entry `x-deadline-outcome`
//! (`refused`, `expired` or `cancelled`); a refusal adds `x-deadline-required-ms` and
//! `x-deadline-remaining-ms`. [`outcome`] and [`refusal`] read them back from a
//! `tonic::Status`, and [`BudgetError::from_grpc`](crate::BudgetError::from_grpc) (or
//! `BudgetError::try_from(status)`) turns one back into the error, the reverse of
//! `From<BudgetError> for tonic::Status`.
//!
//! ## Interop: the `grpc-timeout` edge cases
//!
//! Parsing and encoding follow the gRPC over HTTP/2 protocol spec, so grpc-go, grpc-java and
//! grpcio peers interoperate. The exact behaviour is decided once in
//! [`codec::grpc_timeout`](crate::codec::grpc_timeout) and holds end to end
//! (`tests/grpc/timeout_wire.rs` sends each case to a real tonic server):
//!
//! | inbound `grpc-timeout` | server layer answers |
//! |---|---|
//! | `0n`, `0m`, `0S`, ... | a zero budget is already expired ([C9](crate::contract#c9)): DEADLINE_EXCEEDED, handler not entered |
//! | more than 8 digits (`123456789m`) | INVALID_ARGUMENT, "malformed deadline header \`grpc-timeout\`: more than 8 digits" |
//! | unknown or wrong-case unit (`10s`, `10x`) | INVALID_ARGUMENT naming the header and the unit |
//! | hours that overflow any clock (`99999999H`) | decoded exactly, then clamped to the profile maximum (`max_ms`) |
//!
//! Outbound, the client layer encodes the forward budget in the most precise unit that fits
//! in 8 digits, rounding down ([C2](crate::contract#c2)), and replaces any `grpc-timeout` already on the request.
//!
//! ## Shims ([C11](crate::contract#c11))
//!
//! Both sides use the task-local budget, so an HTTP handler calling a gRPC downstream, or a
//! gRPC handler calling an HTTP downstream, needs no code beyond the call itself: the server
//! layer of one protocol installs the budget, the client layer of the other reads it.
//!
//! See the examples on [`GrpcServerLayer`](server#example) and [`GrpcClientLayer`](client#example).
//!
//! Guide: *gRPC hops*, `docs/guide/grpc.md` in the repository.

pub mod client;
mod convert;
mod downstream;
pub mod server;

// The spelling of a deadline answer as a `tonic::Status` is defined with the HTTP one
// (`answer/grpc.rs`), where the admission layer spells with it too.
pub use crate::answer::grpc::budget_status;
pub(crate) use crate::answer::grpc::malformed_status;
use crate::codec::answer::{grpc_code_outcome, grpc_status_of};
use crate::codec::marker::{self, Field, Marker};
use crate::error::Refused;
use crate::outcome::Outcome;
use crate::status::GrpcStatusMap;

// A `tonic::Status`'s metadata carries the same marker fields as HTTP headers.
impl marker::Fields for tonic::metadata::MetadataMap {
    fn field(&self, field: Field) -> Option<&[u8]> {
        self.get(field.name()).map(|v| v.as_encoded_bytes())
    }
}

/// The terminal status a `tonic::Status` stands for, if it is a deadline status, read as the
/// client layers read every answer ([C4](crate::contract#c4), [C10](crate::contract#c10)): the `x-deadline-outcome` marker first, so a
/// hopbudget answer keeps its outcome under any profile's codes (expiry spelled UNAVAILABLE is
/// still `expired`; `malformed` is no deadline outcome); without a marker, the codes as gRPC
/// defines them: DEADLINE_EXCEEDED is `expired`, CANCELLED is `cancelled`. Other codes are
/// application results: `None`.
///
/// See the [example](budget_status#examples).
pub fn outcome(status: &tonic::Status) -> Option<Outcome> {
    match grpc_code_outcome(status.code() as i32, marker::read(status.metadata())) {
        Outcome::Completed => None,
        outcome => Some(outcome),
    }
}

/// The refusal a `tonic::Status` carries: the required and remaining budget a refuser
/// stated in its metadata (rule [C3](crate::contract#c3)), for a caller deciding whether a retry could fit ([C6](crate::contract#c6)).
///
/// See the [example](budget_status#examples).
pub fn refusal(status: &tonic::Status) -> Option<Refused> {
    if outcome(status) != Some(Outcome::Refused) {
        return None;
    }
    marker::refusal(status.metadata())
}

/// The header part of a trailers-only gRPC response for `status`.
pub(crate) fn status_parts(status: tonic::Status) -> http::response::Parts {
    status.into_http::<()>().into_parts().0
}

/// Note on the hop the outcome a call's own status states (rule [C17](crate::contract#c17)): DEADLINE_EXCEEDED is
/// `expired`, or `refused` when marked so (with the required budget it names), CANCELLED is
/// `cancelled`. Any other status is the application's result.
pub(crate) fn note_answer(
    guard: &mut crate::hop::HopGuard,
    headers: &http::HeaderMap,
    map: &GrpcStatusMap,
) {
    let Some(code) = grpc_status_of(headers) else {
        return;
    };
    guard.answer_status(crate::hop::AnswerStatus::Grpc(code));
    if marker::read(headers) == Some(Marker::Stated(Outcome::Refused)) {
        if let Some(refused) = marker::refusal(headers) {
            guard.answered_refused(refused);
            return;
        }
    }
    if code == map.expired.as_i32() {
        guard.answered(Outcome::Expired);
    } else if code == map.cancelled.as_i32() {
        guard.answered(Outcome::Cancelled);
    }
}
