use std::sync::Arc;

use tower_layer::Layer;

use super::ClientBudget;
use super::outbound::Shared;
use crate::Profile;

/// Applies [`ClientBudget`] to an HTTP client service.
///
/// See the [module docs](super) for what it does and an example.
#[derive(Clone, Debug)]
pub struct ClientBudgetLayer {
    pub(super) shared: Arc<Shared>,
}

impl ClientBudgetLayer {
    /// A layer that follows `profile`: hop margin, transit allowance, refuse threshold, edge
    /// total, outbound carrier and status codes.
    ///
    /// See the [module example](super#example).
    pub fn new(profile: Profile) -> Self {
        Self {
            shared: Shared::new(profile),
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
