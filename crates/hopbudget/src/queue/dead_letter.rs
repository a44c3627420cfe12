//! Why a message was not processed, and how that is written on the copy sent to the
//! dead-letter destination (scenario S10: nothing is lost).
//!
//! A dead-lettered message is republished with its payload and *all* its original headers,
//! plus two of hopbudget's: [`REASON_HEADER`] (`expired`, `refused` or `malformed`) and
//! [`DETAIL_HEADER`], one line a person can read. The original is acknowledged only once the
//! copy is safely stored, so a crash in between redelivers rather than loses it.

use std::fmt;
use std::time::Duration;

use super::HeaderCarrier;
use crate::Refused;

/// Header on a dead-lettered copy: why it was not processed (`expired`, `refused`, `malformed`).
pub const REASON_HEADER: &str = "deadline-dead-letter-reason";
/// Header on a dead-lettered copy: one readable line of detail (the header and the reason,
/// how long ago the deadline passed, ...).
pub const DETAIL_HEADER: &str = "deadline-dead-letter-detail";

/// Why a message goes to the dead-letter destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// Its deadline (plus the profile's skew allowance) had passed: before any work, or while
    /// the work ran (rule C4).
    Expired,
    /// What was left of its budget could not cover the work's minimum (rule C3).
    Refused,
    /// Its deadline header could not be read (rule C9).
    Malformed,
}

impl Reason {
    /// The value written in [`REASON_HEADER`].
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::Expired => "expired",
            Reason::Refused => "refused",
            Reason::Malformed => "malformed",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A message to republish to the dead-letter destination instead of processing it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    reason: Reason,
    detail: String,
}

impl DeadLetter {
    pub(super) fn expired_before_work(late_by: Duration) -> Self {
        Self {
            reason: Reason::Expired,
            detail: format!(
                "deadline passed {} ms before the consumer took the message",
                late_by.as_millis()
            ),
        }
    }

    pub(super) fn expired_during_work(budget: Duration) -> Self {
        Self {
            reason: Reason::Expired,
            detail: format!(
                "deadline passed while the work ran (it had {} ms); the work was stopped",
                budget.as_millis()
            ),
        }
    }

    pub(super) fn refused(refused: Refused) -> Self {
        Self {
            reason: Reason::Refused,
            detail: refused.to_string(),
        }
    }

    pub(super) fn malformed(header: &str, reason: &dyn fmt::Display) -> Self {
        Self {
            reason: Reason::Malformed,
            detail: format!("malformed deadline header `{header}`: {reason}"),
        }
    }

    /// Why.
    pub fn reason(&self) -> Reason {
        self.reason
    }

    /// One readable line of detail.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// Write [`REASON_HEADER`] and [`DETAIL_HEADER`] onto the copy's headers (which should
    /// already hold all of the original's).
    pub fn annotate<C: HeaderCarrier + ?Sized>(&self, headers: &mut C) {
        headers.set(REASON_HEADER, self.reason.as_str());
        headers.set(DETAIL_HEADER, &self.detail);
    }
}

impl fmt::Display for DeadLetter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "dead-lettered ({}): {}", self.reason, self.detail)
    }
}
