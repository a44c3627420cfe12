use tower_layer::Layer;

use super::ServerBudget;
use crate::hop::server_layer::ServerLayer;
use crate::macros::define_server_layer_builders;
use crate::observe::Protocol;
use crate::profile::shared::SharedProfile;

/// Applies [`ServerBudget`] to a service: one budget per inbound request.
///
/// See the [module docs](super) for what it does and an example.
#[derive(Clone, Debug)]
pub struct ServerBudgetLayer {
    pub(super) core: ServerLayer,
}

impl ServerBudgetLayer {
    /// A layer that follows `profile`: its inbound carriers, maximum, edge total, route
    /// minimums, streaming routes and status codes. Pass a [`SharedProfile`] to replace the
    /// profile, or turn enforcement off, while the service runs (rule [C24](crate::contract#c24)).
    ///
    /// See the [module example](super#example).
    pub fn new(profile: impl Into<SharedProfile>) -> Self {
        Self {
            core: ServerLayer::new(profile, Protocol::Http),
        }
    }

    define_server_layer_builders!("super#example");
}

impl<S> Layer<S> for ServerBudgetLayer {
    type Service = ServerBudget<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ServerBudget {
            inner,
            config: self.core.config().clone(),
        }
    }
}
