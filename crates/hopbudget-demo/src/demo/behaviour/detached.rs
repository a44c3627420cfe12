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

use super::timeouts::Timeouts;
use crate::demo::collector::BackgroundOutcome;
use crate::demo::hop_error::{self, HopError};
use crate::demo::mode::Mode;
use crate::demo::node::{HopMode, Layers, Node};
use crate::demo::peer::Peer;
use crate::demo::queue::Job;
use crate::demo::services;

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
            // Dropping the awaiting future does not stop the work below.
            run_detached(async move {
                let result = services::body(node, id).await;
                guard.finish(hop_error::outcome_of(&result), hop_error::failed(&result));
                result
            })
            .await
        })
    }

    delegate_to!(BASE);
}

/// Run a hop's handler on a task of its own: dropping the caller's future does not stop it
/// (the detached modes' defining trait). It keeps the hop's span, the trace context, as an
/// instrumented executor would.
pub(super) async fn run_detached(
    handler: impl std::future::Future<Output = Result<u32, HopError>> + Send + 'static,
) -> Result<u32, HopError> {
    use tracing::Instrument as _;
    tokio::spawn(handler.in_current_span())
        .await
        .unwrap_or_else(|e| Err(HopError::Failed(format!("handler task failed: {e}"))))
}
