//! What each demo mode does: one implementation of [`HopMode`] per
//! file, the few decisions in which the runs differ (scenario S18), so that following one
//! request means reading one file. [`Mode::behaviour`] is the one place that maps a mode's
//! name to one.

/// The [`HopMode`] methods a mode takes unchanged from the mode `$base` (a `static`):
/// everything but `mode`, `layers` and `admit`, the few in which the detached variants differ.
macro_rules! delegate_to {
    ($base:expr) => {
        fn before_work(&self, node: &Node) -> Result<(), HopError> {
            $base.before_work(node)
        }

        fn own_work<'a>(
            &'a self,
            node: &'a Node,
            cost: Duration,
        ) -> BoxFuture<'a, Result<(), HopError>> {
            $base.own_work(node, cost)
        }

        fn call<'a>(
            &'a self,
            node: &'a Node,
            callee: usize,
            peer: &'a Peer,
            id: u64,
        ) -> BoxFuture<'a, Result<u32, HopError>> {
            $base.call(node, callee, peer, id)
        }

        fn background_headers(&self, node: &Node) -> HeaderMap {
            $base.background_headers(node)
        }

        fn consume<'a>(&'a self, job: &'a Job) -> BoxFuture<'a, BackgroundOutcome> {
            $base.consume(job)
        }

        fn client_forward(&self, budget: Duration) -> Option<Duration> {
            $base.client_forward(budget)
        }
    };
}

mod detached;
mod forgetful;
mod propagated;
mod timeouts;

use std::sync::Arc;

pub use detached::Detached;
pub use forgetful::Forgetful;
pub use propagated::Propagated;
pub use timeouts::Timeouts;

use super::mode::Mode;
use super::node::HopMode;

// Here, not in mode.rs: the name of a mode stays a file every other one can import, while the
// behaviours import the node, the body and the peers.
impl Mode {
    /// The behaviour of one service in this mode; `forgetful` marks the service that ignores
    /// inbound deadlines (S13), which only changes anything where deadlines are propagated.
    pub fn behaviour(self, forgetful: bool) -> Arc<dyn HopMode> {
        match self {
            Mode::Detached => Arc::new(Detached),
            Mode::Timeouts => Arc::new(Timeouts),
            Mode::Propagated if forgetful => Arc::new(Forgetful),
            Mode::Propagated => Arc::new(Propagated),
        }
    }
}
