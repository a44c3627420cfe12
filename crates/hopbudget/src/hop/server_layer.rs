//! What every protocol's server layer holds and how it is built, written once: the HTTP
//! ([`ServerBudgetLayer`](crate::http::server::ServerBudgetLayer)) and gRPC
//! ([`GrpcServerLayer`](crate::grpc::server::GrpcServerLayer)) layers each wrap a
//! [`ServerLayer`] and add only what their protocol needs (a gRPC server's declared methods).

use std::sync::Arc;

use super::HopConfig;
use crate::clock::WallClock;
use crate::observe::Protocol;
use crate::{profile::Profile, profile::shared::SharedProfile};

/// A server layer's configuration, shared by every service it makes and every request they
/// serve. A builder method takes the configuration back when no service shares it yet, or
/// rebuilds it (nothing learned) when one does.
#[derive(Clone, Debug)]
pub(crate) struct ServerLayer {
    config: Arc<HopConfig>,
}

impl ServerLayer {
    /// A layer for `protocol` following `profile`.
    pub(crate) fn new(profile: impl Into<SharedProfile>, protocol: Protocol) -> Self {
        Self {
            config: Arc::new(HopConfig::new(profile, protocol)),
        }
    }

    /// Convert epoch carriers with `clock` instead of the machine's wall clock.
    pub(crate) fn with_wall_clock(self, clock: Arc<dyn WallClock>) -> Self {
        self.map(|config| config.with_wall_clock(clock))
    }

    /// This layer with its configuration changed by `change`.
    pub(crate) fn map(self, change: impl FnOnce(HopConfig) -> HopConfig) -> Self {
        let config = Arc::try_unwrap(self.config).unwrap_or_else(|shared| shared.rebuilt());
        Self {
            config: Arc::new(change(config)),
        }
    }

    /// The configuration the services this layer makes share.
    pub(crate) fn config(&self) -> &Arc<HopConfig> {
        &self.config
    }

    /// The profile in force now.
    pub(crate) fn profile(&self) -> Arc<Profile> {
        self.config.profile()
    }

    /// The handle the layer reads its profile from.
    pub(crate) fn shared_profile(&self) -> &SharedProfile {
        self.config.shared_profile()
    }
}
