//! The request's budget in one call from a tonic handler, as axum's extractor gives it to an
//! axum handler.

use crate::budget::RequestBudget;

/// The budget of a tonic request, as [`GrpcServerLayer`](super::GrpcServerLayer) put it in
/// the request's extensions (or, failing that, the ambient budget of the task).
///
/// A handler without the layer around it gets `INTERNAL` with a message that says what is
/// missing, the way axum's extractors reject a missing extension: it is a wiring mistake of
/// the service, and answering as if there were no deadline would hide it ([C8](crate::contract#c8)).
///
/// ```
/// use hopbudget::grpc::server::BudgetExt;
///
/// async fn quote(request: tonic::Request<()>) -> Result<tonic::Response<u64>, tonic::Status> {
///     let budget = request.budget()?;
///     Ok(tonic::Response::new(budget.remaining().as_millis() as u64))
/// }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let without_layer = quote(tonic::Request::new(())).await.unwrap_err();
/// assert_eq!(without_layer.code(), tonic::Code::Internal);
/// assert!(without_layer.message().contains("GrpcServerLayer"));
/// # }
/// ```
pub trait BudgetExt {
    /// The request's budget, or `INTERNAL` naming what is missing.
    ///
    /// See the [trait example](BudgetExt).
    #[allow(clippy::result_large_err)] // tonic's own handlers return `Result<_, Status>`.
    fn budget(&self) -> Result<RequestBudget, tonic::Status>;
}

impl<T> BudgetExt for tonic::Request<T> {
    fn budget(&self) -> Result<RequestBudget, tonic::Status> {
        self.extensions()
            .get::<RequestBudget>()
            .cloned()
            .or_else(RequestBudget::current)
            .ok_or_else(|| {
                tonic::Status::internal(
                    "hopbudget: the request has no RequestBudget; is GrpcServerLayer installed \
                     around this service?",
                )
            })
    }
}
