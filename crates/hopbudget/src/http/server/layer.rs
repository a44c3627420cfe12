use std::sync::Arc;

use tower_layer::Layer;

use super::ServerBudget;
use crate::clock::WallClock;
use crate::hop::HopConfig;
use crate::observe::Protocol;
use crate::{Profile, SharedProfile};

/// Applies [`ServerBudget`] to a service: one budget per inbound request.
///
/// See the [module docs](super) for what it does and an example.
#[derive(Clone, Debug)]
pub struct ServerBudgetLayer {
    pub(super) config: Arc<HopConfig>,
}

impl ServerBudgetLayer {
    /// A layer that follows `profile`: its inbound carriers, maximum, edge total, route
    /// minimums, streaming routes and status codes. Pass a [`SharedProfile`] to replace the
    /// profile, or turn enforcement off, while the service runs (rule [C24](crate::contract#c24)).
    ///
    /// See the [module example](super#example).
    pub fn new(profile: impl Into<SharedProfile>) -> Self {
        Self {
            config: Arc::new(HopConfig::new(profile, Protocol::Http)),
        }
    }

    /// Convert epoch carriers (`x-request-deadline`) with `clock` instead of the machine's
    /// wall clock: a host whose clock is skewed ([S3](crate::contract#s3)) or stepped ([S5](crate::contract#s5)).
    ///
    /// See the [module example](super#example).
    pub fn with_wall_clock(self, clock: Arc<dyn WallClock>) -> Self {
        let config = match Arc::try_unwrap(self.config) {
            Ok(config) => config,
            Err(shared) => HopConfig::new(shared.shared_profile().clone(), Protocol::Http),
        };
        Self {
            config: Arc::new(config.with_wall_clock(clock)),
        }
    }

    /// The profile this layer follows.
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

impl<S> Layer<S> for ServerBudgetLayer {
    type Service = ServerBudget<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ServerBudget {
            inner,
            layer: self.clone(),
        }
    }
}
