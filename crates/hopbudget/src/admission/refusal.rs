//! How [`Admission`](super::Admission) spells a waiter it drops: an HTTP refusal like the
//! server layer's, or the [`BudgetError`] itself as the service's error. The gRPC spelling
//! (`GrpcAnswer`, feature `grpc`) is in `grpc`, beside the rest of admission's tonic glue.

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

/// Answers like the HTTP server layer (`ServerBudgetLayer`, feature `http`) does ([C3](crate::contract#c3), [C10](crate::contract#c10)):
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
        Ok(crate::answer::http::http_answer(&error, &self.status))
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
