//! What a gRPC call's response (its head and its body) needs to tell a late CANCELLED from a
//! real one, and to end a body the wait cut off ([C4](crate::contract#c4), [C5](crate::contract#c5)). Shared by the response future and
//! the response body, so neither reaches into the other.

use std::sync::Arc;

use http::HeaderValue;

use crate::budget::{Deadline, RequestBudget};
use crate::codec::answer::grpc_outcome;
use crate::codec::marker::{self, Marker};
use crate::error::BudgetError;
use crate::grpc::{budget_status, status_parts};
use crate::hop::outbound::Shared;
use crate::hop::outbound::reply::settle;
use crate::outcome::Outcome;

/// What the response needs to tell a late CANCELLED from a real one.
#[derive(Clone, Debug)]
pub(super) struct Watch {
    pub(super) budget: RequestBudget,
    /// The instant the downstream was told (its `grpc-timeout`, on our clock).
    pub(super) call_deadline: Deadline,
    pub(super) shared: Arc<Shared>,
}

impl Watch {
    /// Whether a failure seen now is really the deadline: the downstream's time (or ours)
    /// had run out when it arrived, by the rule every client applies to a late `cancelled`
    /// ([C4](crate::contract#c4), `hop::outbound::reply::settle`).
    pub(super) fn is_past_deadline(&self) -> bool {
        settle(Outcome::Cancelled, self.call_deadline, &self.budget) == Outcome::Expired
    }

    pub(super) fn answer(&self, err: BudgetError) -> http::response::Parts {
        status_parts(budget_status(
            &err,
            self.shared.profile.current().grpc_status(),
        ))
    }

    /// The trailers that end a body cut off by the wait: DEADLINE_EXCEEDED marked expired, or
    /// CANCELLED when the request's budget was cancelled ([C4](crate::contract#c4), [C5](crate::contract#c5)).
    pub(super) fn trailers(&self, err: &BudgetError) -> http::HeaderMap {
        let mut trailers = status_parts(budget_status(
            err,
            self.shared.profile.current().grpc_status(),
        ))
        .headers;
        trailers.remove(http::header::CONTENT_TYPE);
        trailers
    }
}

/// Rewrite a `cancelled` answer that arrived after the deadline as the profile's expiry
/// (rule [C4](crate::contract#c4)), read as every client reads an answer ([`settle`]): by its marker first, so a
/// peer that spells cancellation with another code is relabelled too.
pub(super) fn relabel_late_cancel(headers: &mut http::HeaderMap, watch: &Watch) {
    let Some(stated) = grpc_outcome(headers) else {
        return;
    };
    if stated != Outcome::Cancelled
        || settle(stated, watch.call_deadline, &watch.budget) != Outcome::Expired
    {
        return;
    }
    let code = watch
        .shared
        .profile
        .current()
        .grpc_status()
        .expired
        .as_i32();
    let code = crate::codec::Encoded::decimal(u64::try_from(code).unwrap_or(4));
    headers.insert("grpc-status", code.to_header_value());
    headers.insert(
        "grpc-message",
        HeaderValue::from_static(
            "deadline exceeded (the peer reported CANCELLED after the deadline)",
        ),
    );
    marker::mark(headers, Marker::Stated(Outcome::Expired));
}
