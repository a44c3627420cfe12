use std::sync::Arc;

use tower_layer::Layer;

use super::GrpcServer;
use crate::profile::Profile;

/// Applies [`GrpcServer`] to a tonic server's services. See the [module docs](super).
#[derive(Clone, Debug)]
pub struct GrpcServerLayer {
    pub(super) shared: Arc<Shared>,
}

/// What every request of one server needs, resolved once.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) profile: Profile,
    pub(super) service: Arc<str>,
}

impl GrpcServerLayer {
    /// A layer reading budgets, thresholds and status codes from `profile`.
    pub fn new(profile: Profile) -> Self {
        let service = Arc::from(profile.service());
        Self {
            shared: Arc::new(Shared { profile, service }),
        }
    }

    /// The profile this layer applies.
    pub fn profile(&self) -> &Profile {
        &self.shared.profile
    }
}

impl<S> Layer<S> for GrpcServerLayer {
    type Service = GrpcServer<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcServer {
            inner,
            shared: self.shared.clone(),
        }
    }
}
