//! Reading a gRPC answer for a retry policy ([C6](crate::contract#c6)): a refusal arrives as a successful HTTP
//! response whose status is in its headers, so it is classified from those.

use crate::classify::{self, Attempt, Classify};
use crate::codec::answer::{grpc_outcome, grpc_status_of};
use crate::codec::marker;
use crate::outcome::Outcome;
use crate::status::GrpcCode;

/// Classifies gRPC answers, as they come back through
/// [`GrpcClientLayer`](crate::grpc::client::GrpcClientLayer), for [`DeadlineRetry`](crate::retry::DeadlineRetry) ([C6](crate::contract#c6)).
///
/// A gRPC status is not an error at the tower level: it arrives as a successful HTTP
/// response with `grpc-status` in its headers (a trailers-only answer, as every refusal is)
/// or in its trailers. [`BudgetErrors`](crate::retry::BudgetErrors) sees only `Err` and would call a refusal `Done`. This
/// reads the response's headers the way the client layers read every answer (the
/// `x-deadline-outcome` marker first, then the code): `refused` with the requirement the
/// refuser stated, `expired`, `cancelled`; UNAVAILABLE is retryable; every other status,
/// and an answer whose status comes in its trailers (the reply is already streaming), is
/// `Done`. Errors are classified as [`BudgetErrors`](crate::retry::BudgetErrors) does.
///
/// # Examples
///
/// The stack for a tonic channel: [`ReplayLayer`](crate::grpc::client::ReplayLayer) keeps
/// the request body so a retry can resend it, the retry sits outside the client layer so that
/// every attempt is stamped from the same shrinking budget, and
/// [`into_tonic`](crate::grpc::client::into_tonic) hands the channel the body type it takes.
///
/// ```no_run
/// use hopbudget::grpc::client::{GrpcClientLayer, ReplayLayer, into_tonic};
/// use hopbudget::grpc::client::GrpcReplies;
/// use hopbudget::retry::DeadlineRetry;
/// use hopbudget::Profile;
/// use tower::ServiceBuilder;
///
/// # fn stack() {
/// let endpoint = tonic::transport::Endpoint::from_static("http://tax.internal:50051");
/// let service = ServiceBuilder::new()
///     .layer(ReplayLayer)
///     .layer(tower::retry::RetryLayer::new(DeadlineRetry::new(GrpcReplies, 2)))
///     .layer(GrpcClientLayer::new(Profile::default()).destination(endpoint.uri()))
///     .map_request(into_tonic)
///     .service(endpoint.connect_lazy());
/// // let mut tax = TaxClient::new(service); // any tonic-generated client
/// # let _ = service; }
/// ```
///
/// What one answer amounts to:
///
/// ```
/// use std::time::Duration;
/// use hopbudget::grpc::client::GrpcReplies;
/// use hopbudget::retry::{Attempt, Classify};
/// use hopbudget::{BudgetError, Refused};
///
/// let refused = BudgetError::Refused(Refused::new(Duration::from_millis(200), Duration::from_millis(120)));
/// let answer = tonic::Status::from(refused).into_http::<()>();
/// let result: Result<_, tower::BoxError> = Ok(answer);
/// assert_eq!(
///     GrpcReplies.classify(&result),
///     Attempt::Refused { required: Some(Duration::from_millis(200)) }
/// );
/// let result: Result<_, tower::BoxError> = Ok(tonic::Status::not_found("no").into_http::<()>());
/// assert_eq!(GrpcReplies.classify(&result), Attempt::Done);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct GrpcReplies;

impl<B> Classify<http::Response<B>, tower::BoxError> for GrpcReplies {
    fn classify(&self, result: &Result<http::Response<B>, tower::BoxError>) -> Attempt {
        let response = match result {
            Ok(response) => response,
            Err(e) => return classify::error_attempt(e),
        };
        let headers = response.headers();
        match grpc_outcome(headers) {
            // The status is in the trailers: the answer is under way, not for a retry.
            None => Attempt::Done,
            Some(Outcome::Refused) => Attempt::Refused {
                required: marker::required(headers),
            },
            Some(Outcome::Expired) => Attempt::Expired,
            Some(Outcome::Cancelled) => Attempt::Cancelled,
            Some(Outcome::Completed) => {
                if grpc_status_of(headers) == Some(GrpcCode::Unavailable.as_i32()) {
                    Attempt::Retryable
                } else {
                    Attempt::Done
                }
            }
        }
    }
}
