use std::sync::Arc;

use tower_layer::Layer;

use super::GrpcClient;
use crate::profile::Profile;

/// Applies [`GrpcClient`] to a tonic `Channel` or any tower gRPC client service. See the
/// [module docs](super).
///
/// See the [module example](super#example).
#[derive(Clone, Debug)]
pub struct GrpcClientLayer {
    pub(super) profile: Arc<Profile>,
}

impl GrpcClientLayer {
    /// A layer forwarding budgets with `profile`'s policy, fallback and status codes.
    ///
    /// See the [module example](super#example).
    pub fn new(profile: Profile) -> Self {
        Self {
            profile: Arc::new(profile),
        }
    }

    /// The profile this layer applies.
    ///
    /// See the [module example](super#example).
    pub fn profile(&self) -> &Profile {
        &self.profile
    }
}

impl<S> Layer<S> for GrpcClientLayer {
    type Service = GrpcClient<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcClient {
            inner,
            profile: self.profile.clone(),
        }
    }
}
