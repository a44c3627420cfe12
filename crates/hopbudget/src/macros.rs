//! The public methods several middleware types share word for word, written once as
//! crate-private macros (after tower-http's `define_inner_service_accessors!`): each type
//! expands them inside its own `impl`, so they stay inherent methods with their docs, and a
//! fix reaches every type at once.

// The protocol adapters' macros serve features a partial build leaves out; as for the rest
// of the crate (`lib.rs`), the all-features build is where an unused one is an error.
#![cfg_attr(not(feature = "full"), allow(unused_macros))]

/// `get_ref`, `get_mut` and `into_inner` for a middleware whose wrapped service is its
/// `inner` field of type `S`.
///
/// `$what` names the wrapped thing in the docs (`"service"`, `"client"`); `$example` is the
/// intra-doc link of the example the docs point to, resolved where the macro is expanded.
macro_rules! define_inner_service_accessors {
    ($what:literal, $example:literal) => {
        #[doc = concat!("The wrapped ", $what, ".")]
        ///
        #[doc = concat!("See the [module example](", $example, ").")]
        pub fn get_ref(&self) -> &S {
            &self.inner
        }

        #[doc = concat!("The wrapped ", $what, ", mutably.")]
        ///
        #[doc = concat!("See the [module example](", $example, ").")]
        pub fn get_mut(&mut self) -> &mut S {
            &mut self.inner
        }

        #[doc = concat!("Unwrap the inner ", $what, ".")]
        ///
        #[doc = concat!("See the [module example](", $example, ").")]
        pub fn into_inner(self) -> S {
            self.inner
        }
    };
}

/// `profile`, `trust_all` and `untrusted` for a client-side builder (a client layer, the
/// reqwest middleware) whose outbound configuration is its `shared` field, an
/// `Arc<hop::outbound::Shared>`: which destinations see deadline headers
/// ([C19](crate::contract#c19)) is chosen the same way on every client.
///
/// `$builder` names the builder in the docs (`"layer"`, `"middleware"`), `$sends` what a
/// trusted call carries in that protocol's words, `$example` the intra-doc link the docs
/// point to.
macro_rules! define_trust_builders {
    ($builder:literal, $sends:literal, $example:literal) => {
        #[doc = concat!("The profile this ", $builder, " follows.")]
        ///
        #[doc = concat!("See the [module example](", $example, ").")]
        pub fn profile(&self) -> ::std::sync::Arc<$crate::profile::Profile> {
            self.shared.profile.current()
        }

        #[doc = concat!("Send ", $sends, " on every call through this ", $builder, ",")]
        /// whatever the profile's `outbound.trusted_hosts` says about its destination: for a
        /// client that only ever calls internal services.
        ///
        #[doc = concat!("See the [module example](", $example, ").")]
        pub fn trust_all(self) -> Self {
            self.trusting($crate::hop::outbound::Trust::All)
        }

        #[doc = concat!("Mark every call through this ", $builder, " as going to a third party")]
        /// (rule [C19](crate::contract#c19), [S16](crate::contract#s16)): no deadline header
        /// and no `x-deadline-*` marker goes out, not even a per-call timeout the application
        /// set by hand, but the wait is still bounded by the budget (and by that per-call
        /// timeout), and a call is still refused locally when too little is left
        /// ([C2](crate::contract#c2), [C3](crate::contract#c3), [C16](crate::contract#c16)).
        ///
        #[doc = concat!("See the [module example](", $example, ").")]
        pub fn untrusted(self) -> Self {
            self.trusting($crate::hop::outbound::Trust::Nobody)
        }

        /// This builder with its calls' destinations trusted as `trust` says.
        fn trusting(mut self, trust: $crate::hop::outbound::Trust) -> Self {
            self.shared = $crate::hop::outbound::Shared::with_trust(&self.shared, trust);
            self
        }
    };
}

/// `with_wall_clock`, `profile` and `shared_profile` for a server layer that wraps a
/// [`ServerLayer`](crate::hop::server_layer::ServerLayer) as its `core` field: the protocol's
/// layer adds only what is its own. `$example` is the intra-doc link the docs point to.
macro_rules! define_server_layer_builders {
    ($example:literal) => {
        /// Convert epoch carriers with `clock` instead of the machine's wall clock: a host whose
        /// clock is skewed ([S3](crate::contract#s3)) or stepped ([S5](crate::contract#s5)).
        ///
        #[doc = concat!("See the [module example](", $example, ").")]
        pub fn with_wall_clock(
            self,
            clock: ::std::sync::Arc<dyn $crate::clock::WallClock>,
        ) -> Self {
            Self {
                core: self.core.with_wall_clock(clock),
            }
        }

        /// The profile this layer follows.
        ///
        #[doc = concat!("See the [module example](", $example, ").")]
        pub fn profile(&self) -> ::std::sync::Arc<$crate::profile::Profile> {
            self.core.profile()
        }

        /// The handle the layer reads its profile from: replace the profile, or turn
        /// enforcement off, through it while the service runs (rule
        /// [C24](crate::contract#c24)).
        ///
        /// See the [example](crate::SharedProfile#examples).
        pub fn shared_profile(&self) -> &$crate::SharedProfile {
            self.core.shared_profile()
        }
    };
}

pub(crate) use {
    define_inner_service_accessors, define_server_layer_builders, define_trust_builders,
};
