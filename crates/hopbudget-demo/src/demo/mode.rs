//! What a demo mode is: one implementation of [`HopMode`], the few decisions in which the
//! runs differ (scenario S18), so that following one request means reading one file.
//!
//! A hop of any mode goes through the same body (`services::body`: wait for a work slot, do
//! its own work, call downstream in parallel, hand off background work); the mode decides how
//! the request is admitted and whether its work survives the caller ([`HopMode::admit`]),
//! whether the work still fits after queueing ([`HopMode::before_work`]), how its own work
//! and each outbound call are bounded ([`HopMode::own_work`], [`HopMode::call`]), what a
//! background message carries and how it is consumed ([`HopMode::background_headers`],
//! [`HopMode::consume`]), what the client sends ([`HopMode::client_forward`]) and which of
//! hopbudget's layers sit on the servers and clients ([`HopMode::layers`]). Each mode lives in
//! its own file under `mode/`; [`Mode::behaviour`] is the one place that maps a name to one.

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

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use http::HeaderMap;
use serde::{Deserialize, Serialize};

pub use detached::Detached;
pub use forgetful::Forgetful;
pub use propagated::Propagated;
pub use timeouts::Timeouts;

use super::collector::BackgroundOutcome;
use super::queue::Job;
use super::services::Node;
use super::wiring::{HopError, Peer};

/// Which behaviour every hop of a run has (S18).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Per-hop fresh timeouts, and each handler on a detached task that survives its caller:
    /// the seeds' incident, and what a service without propagation does in Go or Java.
    Detached,
    /// Per-hop fresh timeouts with Rust's drop-cancellation and nothing else: what a Rust
    /// team has with tonic, axum and `tower::timeout` but without hopbudget.
    Timeouts,
    /// hopbudget at every hop.
    Propagated,
}

impl Mode {
    /// Every mode, in the order the report shows them.
    pub const ALL: [Mode; 3] = [Mode::Detached, Mode::Timeouts, Mode::Propagated];

    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Detached => "detached",
            Mode::Timeouts => "timeouts",
            Mode::Propagated => "propagated",
        }
    }

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

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which of hopbudget's layers a service runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layers {
    /// `GrpcServerLayer` / `ServerBudgetLayer` in front of the handler.
    pub server: bool,
    /// `GrpcClientLayer` / `BudgetMiddleware` on the outbound clients.
    pub client: bool,
}

/// The decisions in which the demo's modes differ; everything else is shared.
pub trait HopMode: fmt::Debug + Send + Sync + 'static {
    /// The mode's name.
    fn mode(&self) -> Mode;

    /// Which of hopbudget's layers the service and its clients run with.
    fn layers(&self) -> Layers;

    /// Whether a leaf service (one that calls nobody, so its hop is its own work) also runs
    /// hopbudget's admission layer inside its server layer: its `concurrency` slots, waiters
    /// served earliest-deadline-first and dropped once their budget no longer covers the
    /// p99 of the service's work (C21, S17). Only modes with the server layer can have it.
    fn admission(&self) -> bool {
        false
    }

    /// Admit one inbound request and run the hop body (`services::body`) under this mode's
    /// rules, recording the arrival and the terminal status in the collector. Whether the
    /// work survives a caller that goes away is decided here.
    fn admit(&self, node: Arc<Node>, id: u64) -> BoxFuture<'static, Result<u32, HopError>>;

    /// After the request waited for a work slot, before the work: may it still start?
    fn before_work(&self, node: &Node) -> Result<(), HopError>;

    /// This service's own work (`cost` long), bounded as the mode bounds it.
    fn own_work<'a>(
        &'a self,
        node: &'a Node,
        cost: Duration,
    ) -> BoxFuture<'a, Result<(), HopError>>;

    /// One outbound call to service `callee` through `peer`; returns how many optional calls
    /// below failed. Counts refusals and expiries as the caller sees them.
    fn call<'a>(
        &'a self,
        node: &'a Node,
        callee: usize,
        peer: &'a Peer,
        id: u64,
    ) -> BoxFuture<'a, Result<u32, HopError>>;

    /// The headers a background message handed off by `node` carries (S11).
    fn background_headers(&self, node: &Node) -> HeaderMap;

    /// Consume one background message.
    fn consume<'a>(&'a self, job: &'a Job) -> BoxFuture<'a, BackgroundOutcome>;

    /// The budget the client sends with its request, given its whole `budget`; `None` sends
    /// no deadline.
    fn client_forward(&self, budget: Duration) -> Option<Duration>;
}

/// Run a hop's handler on a task of its own: dropping the caller's future does not stop it
/// (the detached modes' defining trait). It keeps the hop's span, the trace context, as an
/// instrumented executor would.
async fn run_detached(
    handler: impl std::future::Future<Output = Result<u32, HopError>> + Send + 'static,
) -> Result<u32, HopError> {
    use tracing::Instrument as _;
    tokio::spawn(handler.in_current_span())
        .await
        .unwrap_or_else(|e| Err(HopError::Failed(format!("handler task failed: {e}"))))
}
