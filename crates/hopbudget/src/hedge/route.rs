//! Which replica each attempt of a hedged call went to, so that a hedge goes elsewhere (gRPC's
//! hedging policy, A6: hedged attempts go to distinct backends).
//!
//! A balancer picks a replica for a request; one such as `tower::balance`'s p2c picks in
//! `poll_ready`, before it sees the request, and cannot tell a hedge from a first attempt. The
//! race of a hedged call therefore runs each attempt's call inside an [`AttemptRoute`] shared
//! by the call's attempts: a balancer that knows about hedges ([`HedgeBalance`]) reads the
//! replicas the earlier attempts went to, avoids them, and records its own pick.
//!
//! [`HedgeBalance`]: super::HedgeBalance

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::task::futures::TaskLocalFuture;

tokio::task_local! {
    static ROUTE: AttemptRoute;
}

/// The replicas a hedged call's attempts went to, as the balancer below recorded them: shared
/// by every attempt of one call, and read by the balancer while it routes the next.
///
/// # Examples
///
/// Outside a hedged call there is none:
///
/// ```
/// assert!(hopbudget::hedge::AttemptRoute::current().is_none());
/// ```
///
/// [`HedgeBalance`](super::HedgeBalance) shows it in use.
#[derive(Clone, Debug, Default)]
pub struct AttemptRoute {
    picked: Arc<Mutex<Vec<usize>>>,
}

impl AttemptRoute {
    /// A route for a new call: no attempt routed yet.
    pub(super) fn new() -> Self {
        Self::default()
    }

    /// Run `f` (an attempt's `call`) with this route current.
    pub(super) fn sync_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        ROUTE.sync_scope(self.clone(), f)
    }

    /// Run `fut` (an attempt readied and called) with this route current.
    pub(super) fn scope<F: Future>(&self, fut: F) -> TaskLocalFuture<AttemptRoute, F> {
        ROUTE.scope(self.clone(), fut)
    }

    /// The route of the hedged call whose attempt is being routed now, if any: a balancer calls
    /// this from its `call`.
    ///
    /// See the [example](Self#examples).
    pub fn current() -> Option<Self> {
        ROUTE.try_with(Clone::clone).ok()
    }

    /// The replicas the call's earlier attempts went to (indices into the balancer's list), in
    /// the order they were sent.
    ///
    /// See the [example](Self#examples).
    pub fn taken(&self) -> Vec<usize> {
        self.picked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Record that this attempt goes to `replica`.
    ///
    /// See the [example](Self#examples).
    pub fn pick(&self, replica: usize) {
        self.picked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(replica);
    }
}
