//! A `tonic::Status` read back as a [`BudgetError`], the reverse of
//! `From<BudgetError> for tonic::Status`: a gRPC handler or client that got a deadline status
//! from below can hand the same outcome on, over gRPC or any other protocol (rules [C4](crate::contract#c4), [C10](crate::contract#c10),
//! [C11](crate::contract#c11)).

use std::time::Duration;

use super::{outcome, refusal};
use crate::outcome::Outcome;
use crate::{error::BudgetError, error::Refused};

impl BudgetError {
    /// The deadline outcome a `tonic::Status` stands for, if it stands for one:
    /// DEADLINE_EXCEEDED is [`Expired`](BudgetError::Expired) unless its metadata marks it
    /// refused, in which case it is [`Refused`](BudgetError::Refused) with the required and
    /// remaining budget the refuser stated (zero when it stated none); CANCELLED is
    /// [`Cancelled`](BudgetError::Cancelled). Every other code is an application result:
    /// `None`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use hopbudget::{BudgetError, Refused};
    ///
    /// let refused = BudgetError::Refused(Refused::new(Duration::from_millis(200), Duration::from_millis(120)));
    /// let status = tonic::Status::from(refused);
    /// assert_eq!(BudgetError::from_grpc(&status), Some(refused));
    /// assert_eq!(BudgetError::from_grpc(&tonic::Status::deadline_exceeded("late")), Some(BudgetError::Expired));
    /// assert_eq!(BudgetError::from_grpc(&tonic::Status::not_found("no such order")), None);
    /// ```
    pub fn from_grpc(status: &tonic::Status) -> Option<BudgetError> {
        match outcome(status)? {
            Outcome::Refused => Some(BudgetError::Refused(
                refusal(status).unwrap_or(Refused::new(Duration::ZERO, Duration::ZERO)),
            )),
            Outcome::Expired => Some(BudgetError::Expired),
            Outcome::Cancelled => Some(BudgetError::Cancelled),
            Outcome::Completed => None,
        }
    }
}

impl TryFrom<tonic::Status> for BudgetError {
    /// A status that is not a deadline outcome comes back unchanged, to be handled as the
    /// application result it is.
    type Error = tonic::Status;

    /// [`BudgetError::from_grpc`], keeping the status when it is not a deadline outcome.
    ///
    /// ```
    /// use hopbudget::BudgetError;
    ///
    /// let status = tonic::Status::cancelled("client went away");
    /// assert_eq!(BudgetError::try_from(status).unwrap(), BudgetError::Cancelled);
    /// let other = BudgetError::try_from(tonic::Status::internal("boom")).unwrap_err();
    /// assert_eq!(other.code(), tonic::Code::Internal);
    /// ```
    fn try_from(status: tonic::Status) -> Result<Self, Self::Error> {
        BudgetError::from_grpc(&status).ok_or(status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::GrpcStatusMap;

    #[test]
    fn every_error_survives_the_round_trip() {
        let refused = BudgetError::Refused(Refused::new(
            Duration::from_millis(200),
            Duration::from_millis(120),
        ));
        for err in [refused, BudgetError::Expired, BudgetError::Cancelled] {
            let status = super::super::budget_status(&err, &GrpcStatusMap::default());
            assert_eq!(BudgetError::from_grpc(&status), Some(err));
            assert_eq!(BudgetError::try_from(status).ok(), Some(err));
        }
    }

    #[test]
    fn a_bare_refusal_mark_is_still_a_refusal_and_other_codes_are_not_deadline_outcomes() {
        let mut status = tonic::Status::deadline_exceeded("refused");
        status.metadata_mut().insert(
            crate::status::OUTCOME_METADATA,
            tonic::metadata::AsciiMetadataValue::from_static("refused"),
        );
        assert_eq!(
            BudgetError::from_grpc(&status),
            Some(BudgetError::Refused(Refused::new(
                Duration::ZERO,
                Duration::ZERO
            )))
        );
        // RESOURCE_EXHAUSTED is quota, never time (C10).
        let quota = tonic::Status::resource_exhausted("quota");
        assert_eq!(BudgetError::from_grpc(&quota), None);
        assert_eq!(
            BudgetError::try_from(quota).unwrap_err().code(),
            tonic::Code::ResourceExhausted
        );
    }
}
