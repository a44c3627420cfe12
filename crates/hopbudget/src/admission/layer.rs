use std::sync::Arc;

use tower::Layer;

use super::queue::WaitQueue;
use super::{Admission, AdmissionConfig, ErrorAnswer, HttpAnswer};
use crate::profile::Profile;

/// Applies [`Admission`] to a service: at most `limit` requests do their work at once, and
/// the rest wait by deadline ([C21](crate::contract#c21)).
///
/// Every service this layer makes shares one queue, so a layer applied with axum's
/// `Router::layer` bounds all routes together. See the [module docs](super).
///
/// See the [module example](crate::admission#example).
#[derive(Clone, Debug)]
pub struct AdmissionLayer<A = HttpAnswer> {
    pub(super) shared: Arc<Shared<A>>,
}

/// What every clone of the service reads: the queue, the route costs, the answer.
#[derive(Debug)]
pub(super) struct Shared<A> {
    pub(super) queue: Arc<WaitQueue>,
    pub(super) config: AdmissionConfig,
    pub(super) answer: A,
}

impl AdmissionLayer {
    /// A layer following `config`, answering dropped HTTP requests like the server layer
    /// with the default status codes.
    ///
    /// See the [module example](crate::admission#example).
    pub fn new(config: AdmissionConfig) -> Self {
        Self::with_answer(config, HttpAnswer::default())
    }

    /// The layer the profile's `admission` section describes, answering with the profile's
    /// status codes; `None` when the profile has no `admission` section.
    ///
    /// See the [module example](crate::admission#example).
    pub fn from_profile(profile: &Profile) -> Option<Self> {
        let config = profile.admission()?.clone();
        Some(Self::with_answer(
            config,
            HttpAnswer::new(*profile.http_status()),
        ))
    }
}

impl AdmissionLayer<ErrorAnswer> {
    /// A layer for services that are not HTTP: a dropped request fails with the
    /// [`BudgetError`](crate::BudgetError) as the service's error.
    ///
    /// See the [module example](crate::admission#example).
    pub fn with_errors(config: AdmissionConfig) -> Self {
        Self::with_answer(config, ErrorAnswer)
    }
}

impl<A> AdmissionLayer<A> {
    /// A layer following `config` that spells refusals with `answer`.
    ///
    /// See the [module example](crate::admission#example).
    pub fn with_answer(config: AdmissionConfig, answer: A) -> Self {
        let queue = Arc::new(WaitQueue::new(
            config.limit(),
            config.queue_bound(),
            config.policy(),
        ));
        Self {
            shared: Arc::new(Shared {
                queue,
                config,
                answer,
            }),
        }
    }

    /// The configuration this layer follows.
    ///
    /// See the [module example](crate::admission#example).
    pub fn config(&self) -> &AdmissionConfig {
        &self.shared.config
    }

    /// Slots free right now (shared by every service this layer made).
    ///
    /// See the [module example](crate::admission#example).
    pub fn available(&self) -> usize {
        self.shared.queue.available()
    }

    /// Requests waiting for a slot right now.
    ///
    /// See the [module example](crate::admission#example).
    pub fn waiting(&self) -> usize {
        self.shared.queue.waiting()
    }
}

impl<S, A> Layer<S> for AdmissionLayer<A> {
    type Service = Admission<S, A>;

    fn layer(&self, inner: S) -> Self::Service {
        Admission {
            inner,
            shared: self.shared.clone(),
        }
    }
}
