//! How [`Admission`](super::Admission) spells a waiter it drops: an HTTP refusal like the
//! server layer's, a gRPC status like the gRPC server layer's, or the [`BudgetError`] itself
//! as the service's error.

use http::Response;

use crate::error::BudgetError;
use crate::status::HttpStatusMap;

/// Turns a dropped waiter's [`BudgetError`] into what the wrapped service returns.
///
/// See the [module example](crate::admission#example).
pub trait RefusalAnswer<Res, E> {
    /// The answer for a request the layer will not run.
    ///
    /// See the [module example](crate::admission#example).
    fn answer(&self, error: BudgetError) -> Result<Res, E>;
}

/// Answers like the HTTP server layer (`ServerBudgetLayer`, feature `http`) does (C3, C10):
/// the profile's `refused` status (503) with `Retry-After: 0`, `x-deadline-required-ms`,
/// `x-deadline-remaining-ms` and `x-deadline-outcome: refused`; the `expired` status (504)
/// for a budget already spent. The body is one line of plain text.
///
/// See the [module example](crate::admission#example).
#[derive(Clone, Copy, Debug, Default)]
pub struct HttpAnswer {
    status: HttpStatusMap,
}

impl HttpAnswer {
    /// Answer with the status codes of `status` (usually [`Profile::http_status`](crate::Profile::http_status)).
    ///
    /// See the [module example](crate::admission#example).
    pub const fn new(status: HttpStatusMap) -> Self {
        Self { status }
    }
}

impl<B, E> RefusalAnswer<Response<B>, E> for HttpAnswer
where
    B: From<String>,
{
    fn answer(&self, error: BudgetError) -> Result<Response<B>, E> {
        // Spelled as the server layer spells its own refusals.
        Ok(crate::answer::http_answer(&error, &self.status))
    }
}

/// Answers with the [`BudgetError`] as the service's error, for services that are not HTTP
/// (a `tower::BoxError` accepts it; find it again with [`BudgetError::find`]).
///
/// See the [module example](crate::admission#example).
#[derive(Clone, Copy, Debug, Default)]
pub struct ErrorAnswer;

impl<Res, E> RefusalAnswer<Res, E> for ErrorAnswer
where
    E: From<BudgetError>,
{
    fn answer(&self, error: BudgetError) -> Result<Res, E> {
        Err(E::from(error))
    }
}

/// Answers like the gRPC server layer (`GrpcServerLayer`, feature `grpc`) does (C10): a
/// trailers-only response whose status is the profile's code for the outcome
/// (`DEADLINE_EXCEEDED` by default) with the `x-deadline-outcome` marker and, for a refusal,
/// the required and remaining budget (read back by
/// [`grpc::outcome`](crate::grpc::outcome) and [`grpc::refusal`](crate::grpc::refusal)).
///
/// Made by [`AdmissionLayer::grpc_from_profile`](super::AdmissionLayer::grpc_from_profile).
///
/// ```
/// use std::time::Duration;
/// use hopbudget::admission::{GrpcAnswer, RefusalAnswer};
/// use hopbudget::status::GrpcStatusMap;
/// use hopbudget::{BudgetError, Outcome, Refused};
///
/// let answer = GrpcAnswer::new(GrpcStatusMap::default());
/// let refused = BudgetError::Refused(Refused::new(Duration::from_millis(180), Duration::from_millis(90)));
/// let res: Result<http::Response<String>, std::convert::Infallible> = answer.answer(refused);
/// let status = tonic::Status::from_header_map(res.unwrap().headers()).unwrap();
/// assert_eq!(hopbudget::grpc::outcome(&status), Some(Outcome::Refused));
/// assert_eq!(hopbudget::grpc::refusal(&status).unwrap().required(), Duration::from_millis(180));
/// ```
#[cfg(feature = "grpc")]
#[derive(Clone, Copy, Debug, Default)]
pub struct GrpcAnswer {
    status: crate::status::GrpcStatusMap,
}

#[cfg(feature = "grpc")]
impl GrpcAnswer {
    /// Answer with the codes of `status` (usually [`Profile::grpc_status`](crate::Profile::grpc_status)).
    ///
    /// See the [example](GrpcAnswer).
    pub const fn new(status: crate::status::GrpcStatusMap) -> Self {
        Self { status }
    }
}

#[cfg(feature = "grpc")]
impl<B, E> RefusalAnswer<Response<B>, E> for GrpcAnswer
where
    B: Default,
{
    fn answer(&self, error: BudgetError) -> Result<Response<B>, E> {
        Ok(crate::grpc::budget_status(&error, &self.status).into_http())
    }
}
