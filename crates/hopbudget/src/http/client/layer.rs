use std::sync::Arc;

use tower_layer::Layer;

use super::ClientBudget;
use crate::hop::outbound::Shared;
use crate::macros::define_trust_builders;
use crate::profile::shared::SharedProfile;

/// Applies [`ClientBudget`] to an HTTP client service.
///
/// See the [module docs](super) for what it does and an example.
#[derive(Clone, Debug)]
pub struct ClientBudgetLayer {
    pub(super) shared: Arc<Shared>,
}

impl ClientBudgetLayer {
    /// A layer that follows `profile`: hop margin, transit allowance, refuse threshold, edge
    /// total, outbound carrier, trusted hosts and status codes.
    ///
    /// See the [module example](super#example).
    pub fn new(profile: impl Into<SharedProfile>) -> Self {
        Self {
            shared: Shared::new(profile),
        }
    }

    define_trust_builders!("layer", "the deadline header", "super#example");

    /// Stamp the forward budget in `carrier`, under its default header, instead of the
    /// profile's outbound HTTP carrier: for a callee whose stack reads another carrier (a
    /// sidecar telling a gRPC service in `grpc-timeout`, or a service behind it that reads
    /// Envoy's header). A timeout set by hand on a request ([C16](crate::contract#c16)) is read
    /// from the same header. Every encoder rounds down ([C2](crate::contract#c2)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use http::{Request, Response};
    /// use hopbudget::codec::Carrier;
    /// use hopbudget::http::client::ClientBudgetLayer;
    /// use hopbudget::{Profile, RequestBudget};
    /// use tower::{ServiceBuilder, ServiceExt};
    ///
    /// let profile = Profile::default();
    /// let client = ServiceBuilder::new()
    ///     .layer(ClientBudgetLayer::new(profile.clone()).stamp_in(Carrier::GrpcTimeout))
    ///     .service_fn(|req: Request<()>| async move {
    ///         assert!(!req.headers().contains_key("x-request-timeout-ms"));
    ///         let sent = req.headers()["grpc-timeout"].to_str().unwrap().to_owned();
    ///         Ok::<_, Infallible>(Response::new(sent))
    ///     });
    /// let budget = RequestBudget::local(Duration::from_millis(300), profile.policy());
    /// let res = budget.scope(client.oneshot(Request::new(()))).await.unwrap();
    /// // At most 294 ms, in the finest unit gRPC's eight digits allow (C2).
    /// assert!(res.into_body().into_inner().ends_with('u'));
    /// # }
    /// ```
    pub fn stamp_in(self, carrier: crate::codec::Carrier) -> Self {
        Self {
            shared: Shared::with_carrier(&self.shared, carrier),
        }
    }
}

impl<S> Layer<S> for ClientBudgetLayer {
    type Service = ClientBudget<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ClientBudget {
            inner,
            shared: self.shared.clone(),
        }
    }
}
