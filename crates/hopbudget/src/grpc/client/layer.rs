use std::sync::Arc;

use tower_layer::Layer;

use super::GrpcClient;
use crate::hop::outbound::Shared;
use crate::macros::define_trust_builders;
use crate::profile::shared::SharedProfile;

/// Applies [`GrpcClient`] to a tonic `Channel` or any tower gRPC client service. See the
/// [module docs](super).
///
/// See the [module example](super#example).
#[derive(Clone, Debug)]
pub struct GrpcClientLayer {
    pub(super) shared: Arc<Shared>,
}

impl GrpcClientLayer {
    /// A layer forwarding budgets with `profile`'s policy, fallback and status codes.
    ///
    /// See the [module example](super#example).
    pub fn new(profile: impl Into<SharedProfile>) -> Self {
        Self {
            shared: Shared::new(profile),
        }
    }

    define_trust_builders!("layer", "`grpc-timeout`", "super#example");

    /// Name the destination every call of this layer reaches: the URI of the tonic
    /// `Endpoint` the channel connects to (`endpoint.uri()`), or the origin it was given with
    /// `Endpoint::origin`. Its host is judged by the profile's `outbound.trusted_hosts` on every
    /// call ([C19](crate::contract#c19), [S16](crate::contract#s16)): a channel to `https://api.payments.example` sends no `grpc-timeout`
    /// and no `x-deadline-*` metadata, one to `http://tax.internal:50051` sends them.
    ///
    /// This is how a gRPC layer learns where its calls go: a tonic-generated client's request
    /// carries only the method path, and the channel adds the endpoint's authority below this
    /// layer. Without a named destination, a call that names no host follows the profile's
    /// `outbound.unknown_destination` (default `trusted`; see
    /// [`UnknownDestination`](crate::profile::UnknownDestination) for why). A URI without a
    /// host leaves the destination unknown.
    ///
    /// See the [module example](super#example).
    pub fn destination(self, uri: &http::Uri) -> Self {
        Self {
            shared: Shared::with_destination(&self.shared, uri.host()),
        }
    }
}

impl<S> Layer<S> for GrpcClientLayer {
    type Service = GrpcClient<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcClient {
            inner,
            shared: self.shared.clone(),
        }
    }
}
