use tower_layer::Layer;

use super::{DeclaredMethods, GrpcServer};
use crate::hop::server_layer::ServerLayer;
use crate::macros::define_server_layer_builders;
use crate::observe::Protocol;
use crate::profile::shared::SharedProfile;

/// Applies [`GrpcServer`] to a tonic server's services. See the [module docs](super).
///
/// See the [module example](super#example).
#[derive(Clone, Debug)]
pub struct GrpcServerLayer {
    pub(super) core: ServerLayer,
}

impl GrpcServerLayer {
    /// A layer reading budgets, thresholds and status codes from `profile`. Pass a
    /// [`SharedProfile`] to replace the profile, or turn enforcement off, while the service
    /// runs (rule [C24](crate::contract#c24)).
    ///
    /// See the [module example](super#example).
    pub fn new(profile: impl Into<SharedProfile>) -> Self {
        Self {
            core: ServerLayer::new(profile, Protocol::Grpc),
        }
    }

    define_server_layer_builders!("super#example");

    /// Label each of `methods` as itself from its first call, whatever its outcome: a call
    /// cancelled or expired before the service answered is counted under its method, not
    /// `other` ([C20](crate::contract#c20)). Other paths still earn a label only once the
    /// service answers them as a method it has. Adds to methods given before.
    ///
    /// See the [example](DeclaredMethods#examples).
    pub fn with_methods(self, methods: &DeclaredMethods) -> Self {
        let declared = methods.shared();
        Self {
            core: self
                .core
                .map(|config| config.with_declared_methods(declared)),
        }
    }
}

impl<S> Layer<S> for GrpcServerLayer {
    type Service = GrpcServer<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcServer {
            inner,
            config: self.core.config().clone(),
        }
    }
}
