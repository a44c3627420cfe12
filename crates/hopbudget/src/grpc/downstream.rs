//! [`DownstreamError`] and tonic's `Status`, both ways ([C4](crate::contract#c4), [C10](crate::contract#c10), [C11](crate::contract#c11)): a tonic call's status
//! becomes a `DownstreamError` (a deadline outcome keeps its meaning, any other status is the
//! downstream's own answer), and a `DownstreamError` returned from a tonic handler becomes the
//! status its caller reads.

use crate::downstream::{Kind, grpc_of_http};
use crate::{downstream::DownstreamError, error::BudgetError};

impl DownstreamError {
    /// The downstream's own gRPC status, when it answered one that is not a deadline outcome
    /// (feature `grpc`).
    ///
    /// # Examples
    ///
    /// A tonic call's status: a deadline outcome keeps its meaning, others stay as they are,
    /// and a tonic handler answers them unchanged.
    ///
    /// ```
    /// use hopbudget::{BudgetError, DownstreamError};
    ///
    /// let err = DownstreamError::from(tonic::Status::deadline_exceeded("late"));
    /// assert_eq!(err.budget_error(), Some(&BudgetError::Expired));
    /// let err = DownstreamError::from(tonic::Status::not_found("no such order"));
    /// assert_eq!(err.grpc_status().map(|s| s.code()), Some(tonic::Code::NotFound));
    /// assert_eq!(tonic::Status::from(err).code(), tonic::Code::NotFound);
    /// ```
    pub fn grpc_status(&self) -> Option<&tonic::Status> {
        match &self.kind {
            Kind::Grpc { status, .. } => status.downcast_ref::<tonic::Status>(),
            _ => None,
        }
    }
}

impl From<tonic::Status> for DownstreamError {
    /// A tonic call's status: the deadline outcome it stands for
    /// ([`BudgetError::from_grpc`]), else the downstream's own answer.
    fn from(status: tonic::Status) -> Self {
        let kind = match BudgetError::try_from(status) {
            Ok(b) => Kind::Budget(b),
            Err(status) => Kind::Grpc {
                code: status.code() as i32,
                shown: format!(
                    "downstream answered {:?}: {}",
                    status.code(),
                    status.message()
                ),
                status: Box::new(status),
            },
        };
        Self { kind }
    }
}

impl From<DownstreamError> for tonic::Status {
    /// A deadline outcome as `From<BudgetError>` spells it, a downstream status unchanged, any
    /// other failure as UNAVAILABLE with its message.
    fn from(e: DownstreamError) -> Self {
        match e.kind {
            Kind::Budget(b) => tonic::Status::from(b),
            Kind::Grpc {
                code,
                shown,
                status,
            } => match status.downcast::<tonic::Status>() {
                Ok(status) => *status,
                // Only the gRPC integration makes this kind, always from a `tonic::Status`.
                Err(_) => tonic::Status::new(tonic::Code::from(code), shown),
            },
            Kind::Http(code, message) => {
                tonic::Status::new(tonic::Code::from(grpc_of_http(code)), message)
            }
            Kind::Other(other) => {
                tonic::Status::unavailable(format!("downstream call failed: {other}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{downstream::DownstreamError, error::BudgetError};

    #[test]
    fn grpc_statuses_pass_through_and_deadline_statuses_keep_their_meaning() {
        let e = DownstreamError::from(tonic::Status::deadline_exceeded("late"));
        assert_eq!(e.budget_error(), Some(&BudgetError::Expired));
        assert_eq!(tonic::Status::from(e).code(), tonic::Code::DeadlineExceeded);

        let e = DownstreamError::from(tonic::Status::not_found("no such order"));
        assert_eq!(
            e.grpc_status().map(tonic::Status::code),
            Some(tonic::Code::NotFound)
        );
        assert_eq!(e.to_string(), "downstream answered NotFound: no such order");
        let back = tonic::Status::from(e);
        assert_eq!(
            (back.code(), back.message()),
            (tonic::Code::NotFound, "no such order")
        );
    }

    #[test]
    fn a_downstream_http_answer_becomes_the_grpc_code_that_means_the_same() {
        let e = DownstreamError::http_answer(http::StatusCode::NOT_FOUND, "gone".into());
        assert_eq!(tonic::Status::from(e).code(), tonic::Code::NotFound);
        let e = DownstreamError::http_answer(http::StatusCode::SERVICE_UNAVAILABLE, "busy".into());
        assert_eq!(tonic::Status::from(e).code(), tonic::Code::Unavailable);
    }

    #[test]
    fn every_grpc_code_maps_to_the_http_status_google_gives_it() {
        // The numbers in `downstream::http_of_grpc` are tonic's codes.
        use tonic::Code as G;
        let pairs = [
            (G::Cancelled, 499),
            (G::InvalidArgument, 400),
            (G::DeadlineExceeded, 504),
            (G::NotFound, 404),
            (G::AlreadyExists, 409),
            (G::PermissionDenied, 403),
            (G::ResourceExhausted, 429),
            (G::FailedPrecondition, 400),
            (G::Aborted, 409),
            (G::OutOfRange, 400),
            (G::Unimplemented, 501),
            (G::Internal, 500),
            (G::Unavailable, 503),
            (G::DataLoss, 500),
            (G::Unauthenticated, 401),
            (G::Unknown, 500),
        ];
        for (code, http) in pairs {
            assert_eq!(
                crate::downstream::http_of_grpc(code as i32).as_u16(),
                http,
                "{code:?}"
            );
        }
    }
}
