use std::sync::Arc;

use tower_layer::Layer;

use super::ServerBudget;
use crate::Profile;
use crate::clock::WallClock;
use crate::lifecycle::HopConfig;
use crate::observe::Protocol;
use crate::status::HttpStatusMap;

/// Applies [`ServerBudget`] to a service: one budget per inbound request.
///
/// See the [module docs](super) for what it does and an example.
#[derive(Clone, Debug)]
pub struct ServerBudgetLayer {
    pub(super) config: Arc<HopConfig>,
    pub(super) status: HttpStatusMap,
}

impl ServerBudgetLayer {
    /// A layer that follows `profile`: its inbound carriers, maximum, edge total, route
    /// minimums, streaming routes and status codes.
    pub fn new(profile: Profile) -> Self {
        let status = *profile.http_status();
        Self {
            config: Arc::new(HopConfig::new(profile, Protocol::Http)),
            status,
        }
    }

    /// Convert epoch carriers (`x-request-deadline`) with `clock` instead of the machine's
    /// wall clock: a host whose clock is skewed (S3) or stepped (S5).
    pub fn with_wall_clock(self, clock: Arc<dyn WallClock>) -> Self {
        let config = match Arc::try_unwrap(self.config) {
            Ok(config) => config,
            Err(shared) => HopConfig::new(shared.profile().clone(), Protocol::Http),
        };
        Self {
            config: Arc::new(config.with_wall_clock(clock)),
            status: self.status,
        }
    }

    /// The profile this layer follows.
    pub fn profile(&self) -> &Profile {
        self.config.profile()
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
