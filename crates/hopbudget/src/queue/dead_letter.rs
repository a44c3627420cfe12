//! Why a message was not processed, and how that is written on the copy sent to the
//! dead-letter destination (scenario [S10](crate::contract#s10): nothing is lost).
//!
//! A dead-lettered message is republished with its payload and *all* its original headers,
//! plus two of hopbudget's: [`REASON_HEADER`] (`expired`, `refused` or `malformed`) and
//! [`DETAIL_HEADER`], one line a person can read. The original is acknowledged only once the
//! copy is safely stored, so a crash in between redelivers rather than loses it.

use std::fmt;
use std::time::Duration;

use super::HeaderCarrier;
use crate::error::Refused;

/// Header on a dead-lettered copy: why it was not processed (`expired`, `refused`, `malformed`).
///
/// See the example on [`DeadLetter`].
pub const REASON_HEADER: &str = "deadline-dead-letter-reason";
/// Header on a dead-lettered copy: one readable line of detail (the header and the reason,
/// how long ago the deadline passed, ...).
///
/// See the example on [`DeadLetter`].
pub const DETAIL_HEADER: &str = "deadline-dead-letter-detail";

/// Why a message goes to the dead-letter destination.
///
/// See the example on [`DeadLetter`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// Its deadline (plus the profile's skew allowance) had passed: before any work, or while
    /// the work ran (rule [C4](crate::contract#c4)).
    Expired,
    /// What was left of its budget could not cover the work's minimum (rule [C3](crate::contract#c3)).
    Refused,
    /// Its deadline header could not be read (rule [C9](crate::contract#c9)).
    Malformed,
}

impl Reason {
    /// The value written in [`REASON_HEADER`].
    ///
    /// See the example on [`DeadLetter`].
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
///
/// Given by the [`Gate`](super::Gate) for a message it will not run ([`Decision`](super::Decision)),
/// or by [`Admitted::run`](super::Admitted::run) for work the deadline stopped.
///
/// # Examples
///
/// ```
/// use std::collections::HashMap;
/// use hopbudget::queue::{DETAIL_HEADER, Gate, REASON_HEADER, Reason};
/// use hopbudget::Profile;
///
/// let gate = Gate::new(&Profile::default(), "orders");
/// let original = HashMap::from([
///     ("order-id".to_owned(), "42".to_owned()),
///     ("deadline-epoch-ms".to_owned(), "tomorrow".to_owned()),
/// ]);
/// let dead = gate.check(&original).into_result().expect_err("never processed");
/// assert_eq!(dead.reason(), Reason::Malformed);
/// assert!(dead.detail().contains("deadline-epoch-ms"), "{}", dead.detail());
///
/// // The copy keeps every header of the original, and says why it was not processed.
/// let mut copy = original.clone();
/// dead.annotate(&mut copy);
/// assert_eq!(copy[REASON_HEADER], Reason::Malformed.as_str());
/// assert_eq!(copy[DETAIL_HEADER], dead.detail());
/// assert_eq!(copy["order-id"], "42");
/// // ...then publish the copy to the dead-letter destination, and acknowledge the original.
/// ```
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

    pub(super) fn expired_while_waiting(budget: Duration) -> Self {
        Self {
            reason: Reason::Expired,
            detail: format!(
                "deadline passed while the message waited for a work slot (it had {} ms); no work was started",
                budget.as_millis()
            ),
        }
    }

    pub(super) fn expired_during_retries(started_with: Duration, left: Duration) -> Self {
        Self {
            reason: Reason::Expired,
            detail: format!(
                "deadline ran out during retries: the message was first admitted with {} ms, {} ms are left, too little to try again",
                started_with.as_millis(),
                left.as_millis()
            ),
        }
    }

    pub(super) fn within_skew(late_by: Duration, skew: Duration) -> Self {
        Self {
            reason: Reason::Refused,
            detail: format!(
                "deadline passed {} ms ago by the consumer's clock, within the {} ms skew allowance: not counted as expired, but no budget is left to work with",
                late_by.as_millis(),
                skew.as_millis()
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
    ///
    /// See the [example](Self#examples).
    pub fn reason(&self) -> Reason {
        self.reason
    }

    /// One readable line of detail.
    ///
    /// See the [example](Self#examples).
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// Write [`REASON_HEADER`] and [`DETAIL_HEADER`] onto the copy's headers (which should
    /// already hold all of the original's).
    ///
    /// See the [example](Self#examples).
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
