//! `detached`: the seeds' incident (S18). Per-hop fresh timeouts exactly as in
//! [`Timeouts`], but each hop's handler runs on a detached task, so when its caller's
//! timeout fires and the call is dropped, the work below goes on: what a Go service does that
//! derives its outbound calls from `context.Background()`, or a Java service handing the
//! request to a thread pool.
//!
//! Only [`HopMode::admit`] differs from `timeouts`; everything else is delegated.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use http::HeaderMap;
use tracing::Instrument as _;

use super::{HopMode, Layers, Mode, Timeouts};
use crate::demo::collector::BackgroundOutcome;
use crate::demo::queue::Job;
use crate::demo::services::{self, Node};
use crate::demo::wiring::{self, HopError, Peer};

/// What `detached` shares with `timeouts`.
static BASE: Timeouts = Timeouts;

/// Per-hop fresh timeouts, work survives the caller.
#[derive(Clone, Copy, Debug, Default)]
pub struct Detached;

impl HopMode for Detached {
    fn mode(&self) -> Mode {
        Mode::Detached
    }

    fn layers(&self) -> Layers {
        BASE.layers()
    }

    fn admit(&self, node: Arc<Node>, id: u64) -> BoxFuture<'static, Result<u32, HopError>> {
        Box::pin(async move {
            let guard = node.collector.arrive(node.idx, id, None, None);
            // Detached: dropping the awaiting future below does not stop this task. It keeps
            // the hop's span (the trace context), as an instrumented executor would.
            let handle = tokio::spawn(
                async move {
                    let result = services::body(node, id).await;
                    guard.finish(wiring::outcome_of(&result), wiring::failed(&result));
                    result
                }
                .in_current_span(),
            );
            handle
                .await
                .unwrap_or_else(|e| Err(HopError::Failed(format!("handler task failed: {e}"))))
        })
    }

    fn before_work(&self, node: &Node) -> Result<(), HopError> {
        BASE.before_work(node)
    }

    fn own_work<'a>(
        &'a self,
        node: &'a Node,
        cost: Duration,
    ) -> BoxFuture<'a, Result<(), HopError>> {
        BASE.own_work(node, cost)
    }

    fn call<'a>(
        &'a self,
        node: &'a Node,
        callee: usize,
        peer: &'a Peer,
        id: u64,
    ) -> BoxFuture<'a, Result<u32, HopError>> {
        BASE.call(node, callee, peer, id)
    }

    fn background_headers(&self, node: &Node) -> HeaderMap {
        BASE.background_headers(node)
    }

    fn consume<'a>(&'a self, job: &'a Job) -> BoxFuture<'a, BackgroundOutcome> {
        BASE.consume(job)
    }

    fn client_forward(&self, budget: Duration) -> Option<Duration> {
        BASE.client_forward(budget)
    }
}
