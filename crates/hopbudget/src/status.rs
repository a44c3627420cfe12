//! Terminal statuses and how each one is spelled on the wire (rules [C4](crate::contract#c4), [C5](crate::contract#c5), [C10](crate::contract#c10)).
//!
//! Four ways a hop ends, kept distinct everywhere: on the wire, in traces and in metrics.
//! Expiry (the budget ran out) is never reported as cancellation (the caller left), and neither
//! is ever spelled 429 / RESOURCE_EXHAUSTED, which mean quota, not time.
//!
//! See the example on [`Outcome`](crate::Outcome#examples), which spells each outcome with these maps.
//!
//! Guide: *Errors across hops and shims*, `docs/guide/errors.md` in the repository.

use serde::{Deserialize, Serialize};

use crate::outcome::Outcome;

/// gRPC status codes, as the gRPC spec numbers them. Defined here so the core needs no tonic.
///
/// See the [example](Outcome#examples).
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[repr(i32)]
pub enum GrpcCode {
    Ok = 0,
    Cancelled = 1,
    Unknown = 2,
    InvalidArgument = 3,
    DeadlineExceeded = 4,
    NotFound = 5,
    AlreadyExists = 6,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    FailedPrecondition = 9,
    Aborted = 10,
    OutOfRange = 11,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
    DataLoss = 15,
    Unauthenticated = 16,
}

impl GrpcCode {
    /// The numeric code.
    ///
    /// See the [example](Outcome#examples).
    pub const fn as_i32(self) -> i32 {
        self as i32
    }
}

/// HTTP status codes per terminal status. Defaults follow the contract's table
/// (`docs/contract.md`, "How outcomes are spelled").
///
/// See the [example](Outcome#examples).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpStatusMap {
    /// Refused before start: 503, sent with `Retry-After: 0`.
    pub refused: u16,
    /// Budget ran out: 504.
    pub expired: u16,
    /// Client went away: 499 (client closed request).
    pub cancelled: u16,
    /// Unreadable deadline header: 400.
    pub malformed: u16,
}

impl Default for HttpStatusMap {
    fn default() -> Self {
        Self {
            refused: 503,
            expired: 504,
            cancelled: 499,
            malformed: 400,
        }
    }
}

impl HttpStatusMap {
    /// The HTTP status for a non-completed outcome (`None` for `Completed`).
    ///
    /// See the [example](Outcome#examples).
    pub fn for_outcome(&self, outcome: Outcome) -> Option<u16> {
        match outcome {
            Outcome::Completed => None,
            Outcome::Refused => Some(self.refused),
            Outcome::Expired => Some(self.expired),
            Outcome::Cancelled => Some(self.cancelled),
        }
    }

    /// Read a downstream's HTTP status back as an outcome, so that a 504 from below is
    /// `expired` at this hop too (rule [C4](crate::contract#c4)). Statuses the map does not name are `Completed`:
    /// the hop ended on time, whatever the application said.
    ///
    /// See the [example](Outcome#examples).
    pub fn classify(&self, status: u16) -> Outcome {
        if status == self.expired {
            Outcome::Expired
        } else if status == self.refused {
            Outcome::Refused
        } else if status == self.cancelled {
            Outcome::Cancelled
        } else {
            Outcome::Completed
        }
    }
}

/// gRPC codes per terminal status. Refusal shares DEADLINE_EXCEEDED with expiry and is told
/// apart by the [`OUTCOME_METADATA`] entry.
///
/// See the [example](Outcome#examples).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GrpcStatusMap {
    /// Refused before start: DEADLINE_EXCEEDED, marked in metadata.
    pub refused: GrpcCode,
    /// Budget ran out: DEADLINE_EXCEEDED.
    pub expired: GrpcCode,
    /// Caller went away: CANCELLED.
    pub cancelled: GrpcCode,
    /// Unreadable `grpc-timeout`: INVALID_ARGUMENT.
    pub malformed: GrpcCode,
}

impl Default for GrpcStatusMap {
    fn default() -> Self {
        Self {
            refused: GrpcCode::DeadlineExceeded,
            expired: GrpcCode::DeadlineExceeded,
            cancelled: GrpcCode::Cancelled,
            malformed: GrpcCode::InvalidArgument,
        }
    }
}

impl GrpcStatusMap {
    /// The gRPC code for a non-completed outcome (`None` for `Completed`).
    ///
    /// See the [example](Outcome#examples).
    pub fn for_outcome(&self, outcome: Outcome) -> Option<GrpcCode> {
        match outcome {
            Outcome::Completed => None,
            Outcome::Refused => Some(self.refused),
            Outcome::Expired => Some(self.expired),
            Outcome::Cancelled => Some(self.cancelled),
        }
    }
}

// The three marker names are spelled here, at the bottom of the crate, and `codec::marker`
// (which reads and writes them) names these constants, so the import runs one way.

/// Response header / gRPC metadata naming the budget a refuser needed, in ms: the same as
/// [`codec::marker::REQUIRED_MS`](crate::codec::marker::REQUIRED_MS), where the markers are
/// read and written.
///
/// See the [example](crate::codec::marker#examples).
pub const REQUIRED_MS_HEADER: &str = "x-deadline-required-ms";
/// Response header / gRPC metadata naming the budget a refuser was given, in ms: the same as
/// [`codec::marker::REMAINING_MS`](crate::codec::marker::REMAINING_MS).
///
/// See the [example](crate::codec::marker#examples).
pub const REMAINING_MS_HEADER: &str = "x-deadline-remaining-ms";
/// Response header / gRPC metadata naming how the hop ended, on every answer a hopbudget
/// layer makes itself (`refused`, `expired`, `cancelled`, `malformed`): the same as
/// [`codec::marker::OUTCOME`](crate::codec::marker::OUTCOME).
///
/// See the [example](crate::codec::marker#examples).
pub const OUTCOME_METADATA: &str = "x-deadline-outcome";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_contract_table() {
        let h = HttpStatusMap::default();
        assert_eq!(h.for_outcome(Outcome::Refused), Some(503));
        assert_eq!(h.for_outcome(Outcome::Expired), Some(504));
        assert_eq!(h.for_outcome(Outcome::Cancelled), Some(499));
        assert_eq!(h.for_outcome(Outcome::Completed), None);
        assert_eq!(h.classify(504), Outcome::Expired);
        assert_eq!(h.classify(500), Outcome::Completed);
        let g = GrpcStatusMap::default();
        assert_eq!(
            g.for_outcome(Outcome::Expired),
            Some(GrpcCode::DeadlineExceeded)
        );
        assert_eq!(g.for_outcome(Outcome::Cancelled), Some(GrpcCode::Cancelled));
        assert_eq!(GrpcCode::DeadlineExceeded.as_i32(), 4);
    }
}
