//! The gRPC answer (feature `grpc`): a deadline outcome spelled as a `tonic::Status`, the
//! profile's code marked with `x-deadline-outcome` (and, for a refusal, the required and
//! remaining budget), by the gRPC layers and by the admission layer's
//! [`GrpcAnswer`](crate::grpc::server::GrpcAnswer) alike ([C3](crate::contract#c3),
//! [C9](crate::contract#c9), [C10](crate::contract#c10)). Reading a status back is
//! [`grpc::outcome`](crate::grpc::outcome) and [`grpc::refusal`](crate::grpc::refusal).

use std::time::Duration;

use crate::codec::marker::{self, Marker};
use crate::error::{BudgetError, Refused};
use crate::outcome::Outcome;
use crate::status::{GrpcCode, GrpcStatusMap};

/// The tonic code for a profile's [`GrpcCode`].
fn tonic_code(code: GrpcCode) -> tonic::Code {
    tonic::Code::from_i32(code.as_i32())
}

fn ms_metadata(d: Duration) -> tonic::metadata::AsciiMetadataValue {
    let ms = marker::encode_ms(d);
    // Decimal digits are always valid ASCII metadata.
    tonic::metadata::AsciiMetadataValue::try_from(ms.as_bytes())
        .unwrap_or_else(|_| tonic::metadata::AsciiMetadataValue::from_static("0"))
}

/// A `tonic::Status` for a budget outcome, spelled with `map` and marked with
/// `x-deadline-outcome` (and, for a refusal, the required and remaining milliseconds).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use hopbudget::{BudgetError, Outcome, Refused, status::GrpcStatusMap};
///
/// let refused = BudgetError::Refused(Refused::new(Duration::from_millis(200), Duration::from_millis(120)));
/// let status = hopbudget::grpc::budget_status(&refused, &GrpcStatusMap::default());
/// assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
/// assert_eq!(hopbudget::grpc::outcome(&status), Some(Outcome::Refused));
/// assert_eq!(hopbudget::grpc::refusal(&status).unwrap().required(), Duration::from_millis(200));
/// ```
pub fn budget_status(err: &BudgetError, map: &GrpcStatusMap) -> tonic::Status {
    let outcome = err.outcome();
    let code = map
        .for_outcome(outcome)
        .unwrap_or(GrpcCode::DeadlineExceeded);
    let mut status = tonic::Status::new(tonic_code(code), err.to_string());
    mark(&mut status, outcome, err_refused(err));
    status
}

/// The answer to a deadline header that cannot be read ([C9](crate::contract#c9)): the profile's `malformed` code,
/// a message naming the header and the problem, and `x-deadline-outcome: malformed`, as every
/// answer hopbudget makes itself is marked (the contract's table, [C10](crate::contract#c10)).
pub(crate) fn malformed_status(map: &GrpcStatusMap, message: String) -> tonic::Status {
    let mut status = tonic::Status::new(tonic_code(map.malformed), message);
    status.metadata_mut().insert(
        marker::OUTCOME,
        tonic::metadata::AsciiMetadataValue::from_static(Marker::Malformed.as_str()),
    );
    status
}

fn err_refused(err: &BudgetError) -> Option<Refused> {
    match err {
        BudgetError::Refused(r) => Some(*r),
        _ => None,
    }
}

fn mark(status: &mut tonic::Status, outcome: Outcome, refused: Option<Refused>) {
    let md = status.metadata_mut();
    md.insert(
        marker::OUTCOME,
        tonic::metadata::AsciiMetadataValue::from_static(Marker::Stated(outcome).as_str()),
    );
    if let Some(r) = refused {
        md.insert(marker::REQUIRED_MS, ms_metadata(r.required()));
        md.insert(marker::REMAINING_MS, ms_metadata(r.remaining()));
    }
}

impl From<BudgetError> for tonic::Status {
    /// The default spelling (DEADLINE_EXCEEDED for refused and expired, CANCELLED for
    /// cancelled); use [`budget_status`] for a profile's own mapping.
    fn from(err: BudgetError) -> Self {
        budget_status(&err, &GrpcStatusMap::default())
    }
}
