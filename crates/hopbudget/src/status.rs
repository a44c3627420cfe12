//! Terminal statuses and how each one is spelled on the wire (rules C4, C5, C10).
//!
//! Four ways a hop ends, kept distinct everywhere: on the wire, in traces and in metrics.
//! Expiry (the budget ran out) is never reported as cancellation (the caller left), and neither
//! is ever spelled 429 / RESOURCE_EXHAUSTED, which mean quota, not time.

use std::fmt;

use serde::{Deserialize, Serialize};

/// How a hop ended.
///
/// # Examples
///
/// ```
/// use hopbudget::Outcome;
/// use hopbudget::status::{GrpcCode, GrpcStatusMap, HttpStatusMap};
///
/// assert_eq!(Outcome::Expired.as_str(), "expired");
/// assert!(Outcome::Refused.may_retry() && !Outcome::Expired.may_retry());
///
/// // The contract's spelling (a profile may change the codes, never to 429).
/// let http = HttpStatusMap::default();
/// assert_eq!(http.for_outcome(Outcome::Refused), Some(503));
/// assert_eq!(http.for_outcome(Outcome::Completed), None);
/// assert_eq!(http.classify(504), Outcome::Expired); // a downstream 504 is expiry here too
/// assert_eq!(http.classify(500), Outcome::Completed); // an application error, on time
/// let grpc = GrpcStatusMap::default();
/// assert_eq!(grpc.for_outcome(Outcome::Cancelled), Some(GrpcCode::Cancelled));
/// assert_eq!(GrpcCode::DeadlineExceeded.as_i32(), 4);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The work finished within its budget (whatever the application result was).
    Completed,
    /// The work was not started: the budget was below what it needs (rule C3).
    Refused,
    /// The budget reached zero while the work was in flight (rule C4).
    Expired,
    /// The caller went away while budget remained (rule C5).
    Cancelled,
}

impl Outcome {
    /// All four, for exhaustive reporting.
    pub const ALL: [Outcome; 4] = [
        Outcome::Completed,
        Outcome::Refused,
        Outcome::Expired,
        Outcome::Cancelled,
    ];

    /// The name used in traces (`deadline.outcome`) and metric labels.
    ///
    /// See the [example](Outcome#examples).
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Refused => "refused",
            Outcome::Expired => "expired",
            Outcome::Cancelled => "cancelled",
        }
    }

    /// Whether a caller may retry automatically after this outcome (rule C6). Only a refusal
    /// may be retried, and only when the caller's forward budget covers the refuser's
    /// requirement; that check belongs to the [retry policy](crate::retry::DeadlineRetry).
    ///
    /// See the [example](Outcome#examples).
    pub const fn may_retry(self) -> bool {
        matches!(self, Outcome::Refused)
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

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
    /// `expired` at this hop too (rule C4). Statuses the map does not name are `Completed`:
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
/// apart by the [`REFUSED_METADATA`] entry.
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

/// Response header / gRPC metadata naming the budget a refuser needed, in ms.
pub const REQUIRED_MS_HEADER: &str = "x-deadline-required-ms";
/// Response header / gRPC metadata naming the budget a refuser was given, in ms.
pub const REMAINING_MS_HEADER: &str = "x-deadline-remaining-ms";
/// gRPC metadata marking a DEADLINE_EXCEEDED as a refusal before start: value `refused`.
pub const REFUSED_METADATA: &str = "x-deadline-outcome";

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

    #[test]
    fn only_refusal_may_be_retried() {
        assert!(Outcome::Refused.may_retry());
        assert!(!Outcome::Expired.may_retry());
        assert!(!Outcome::Cancelled.may_retry());
    }
}
