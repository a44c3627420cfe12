use std::sync::Arc;

use tower_layer::Layer;

use super::ServerBudget;
use crate::Profile;

/// Applies [`ServerBudget`] to a service: one budget per inbound request.
///
/// See the [module docs](super) for what it does and an example.
#[derive(Clone, Debug)]
pub struct ServerBudgetLayer {
    pub(super) shared: Arc<Shared>,
}

/// What every request of every clone of the service reads: the profile, and the service name
/// already in the shape trace labels want.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) profile: Profile,
    pub(super) service: Arc<str>,
}

impl ServerBudgetLayer {
    /// A layer that follows `profile`: its inbound carriers, maximum, edge total, route
    /// minimums, streaming routes and status codes.
    pub fn new(profile: Profile) -> Self {
        let service = Arc::from(profile.service());
        Self {
            shared: Arc::new(Shared { profile, service }),
        }
    }

    /// The profile this layer follows.
    pub fn profile(&self) -> &Profile {
        &self.shared.profile
    }
}

impl<S> Layer<S> for ServerBudgetLayer {
    type Service = ServerBudget<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ServerBudget {
            inner,
            shared: self.shared.clone(),
        }
    }
}
