use std::sync::Arc;

use tower_layer::Layer;

use super::{DeclaredMethods, GrpcServer};
use crate::clock::WallClock;
use crate::hop::HopConfig;
use crate::observe::Protocol;
use crate::{Profile, SharedProfile};

/// Applies [`GrpcServer`] to a tonic server's services. See the [module docs](super).
///
/// See the [module example](super#example).
#[derive(Clone, Debug)]
pub struct GrpcServerLayer {
    pub(super) config: Arc<HopConfig>,
}

impl GrpcServerLayer {
    /// A layer reading budgets, thresholds and status codes from `profile`. Pass a
    /// [`SharedProfile`] to replace the profile, or turn enforcement off, while the service
    /// runs (rule [C24](crate::contract#c24)).
    ///
    /// See the [module example](super#example).
    pub fn new(profile: impl Into<SharedProfile>) -> Self {
        Self {
            config: Arc::new(HopConfig::new(profile, Protocol::Grpc)),
        }
    }

    /// Convert epoch carriers with `clock` instead of the machine's wall clock: a host whose
    /// clock is skewed ([S3](crate::contract#s3)) or stepped ([S5](crate::contract#s5)).
    ///
    /// See the [module example](super#example).
    pub fn with_wall_clock(self, clock: Arc<dyn WallClock>) -> Self {
        Self {
            config: Arc::new(self.into_config().with_wall_clock(clock)),
        }
    }

    /// Label each of `methods` as itself from its first call, whatever its outcome: a call
    /// cancelled or expired before the service answered is counted under its method, not
    /// `other` ([C20](crate::contract#c20)). Other paths still earn a label only once the
    /// service answers them as a method it has. Adds to methods given before.
    ///
    /// See the [example](DeclaredMethods#examples).
    pub fn with_methods(self, methods: &DeclaredMethods) -> Self {
        Self {
            config: Arc::new(self.into_config().with_declared_methods(methods.shared())),
        }
    }

    /// This layer's configuration to build on: its own, or a copy when a clone shares it.
    fn into_config(self) -> HopConfig {
        Arc::try_unwrap(self.config).unwrap_or_else(|shared| shared.rebuilt())
    }

    /// The profile this layer applies.
    ///
    /// See the [module example](super#example).
    pub fn profile(&self) -> Arc<Profile> {
        self.config.profile()
    }

    /// The handle the layer reads its profile from: replace the profile, or turn enforcement
    /// off, through it while the service runs (rule [C24](crate::contract#c24)).
    ///
    /// See the [example](crate::SharedProfile#examples).
    pub fn shared_profile(&self) -> &SharedProfile {
        self.config.shared_profile()
    }
}

impl<S> Layer<S> for GrpcServerLayer {
    type Service = GrpcServer<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcServer {
            inner,
            config: self.config.clone(),
        }
    }
}
