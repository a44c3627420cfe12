//! Admission for tonic servers (feature `grpc`): a dropped call is a trailers-only status
//! spelled as the gRPC server layer spells its own refusals ([`budget_status`](crate::grpc::budget_status),
//! [C10](crate::contract#c10), [C21](crate::contract#c21)).

use http::Response;

use super::{AdmissionLayer, RefusalAnswer};
use crate::answer::grpc::budget_status;
use crate::error::BudgetError;
use crate::profile::Profile;
use crate::status::GrpcStatusMap;

/// Answers like the gRPC server layer (`GrpcServerLayer`, feature `grpc`) does ([C10](crate::contract#c10)): a
/// trailers-only response whose status is the profile's code for the outcome
/// (`DEADLINE_EXCEEDED` by default) with the `x-deadline-outcome` marker and, for a refusal,
/// the required and remaining budget (read back by
/// [`grpc::outcome`](crate::grpc::outcome) and [`grpc::refusal`](crate::grpc::refusal)).
///
/// Made by [`AdmissionLayer::grpc_from_profile`].
///
/// ```
/// use std::time::Duration;
/// use hopbudget::admission::RefusalAnswer;
/// use hopbudget::grpc::server::GrpcAnswer;
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
#[derive(Clone, Copy, Debug, Default)]
pub struct GrpcAnswer {
    status: GrpcStatusMap,
}

impl GrpcAnswer {
    /// Answer with the codes of `status` (usually [`Profile::grpc_status`](crate::Profile::grpc_status)).
    ///
    /// See the [example](GrpcAnswer).
    pub const fn new(status: GrpcStatusMap) -> Self {
        Self { status }
    }
}

impl<B, E> RefusalAnswer<Response<B>, E> for GrpcAnswer
where
    B: Default,
{
    fn answer(&self, error: BudgetError) -> Result<Response<B>, E> {
        Ok(budget_status(&error, &self.status).into_http())
    }
}

impl AdmissionLayer<GrpcAnswer> {
    /// The layer the profile's `admission` section describes, for a tonic server (inside
    /// `GrpcServerLayer`): a dropped call is answered with the profile's gRPC status for the
    /// outcome, marked like the gRPC server layer's refusals; `None` when the profile has no
    /// `admission` section.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use hopbudget::Profile;
    /// use hopbudget::admission::AdmissionLayer;
    /// use hopbudget::grpc::server::GrpcServerLayer;
    ///
    /// let profile = Profile::from_yaml("admission: {limit: 6}", "inline")?;
    /// let server = tonic::transport::Server::builder()
    ///     // The server layer outside: the budget exists before the call queues.
    ///     .layer(GrpcServerLayer::new(profile.clone()))
    ///     .layer(AdmissionLayer::grpc_from_profile(&profile).expect("has an admission section"));
    /// # let _ = server;
    /// # Ok(())
    /// # }
    /// ```
    pub fn grpc_from_profile(profile: &Profile) -> Option<Self> {
        let config = profile.admission()?.clone();
        Some(Self::with_answer(
            config,
            GrpcAnswer::new(*profile.grpc_status()),
        ))
    }
}
