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

use super::{HopMode, Layers, Mode, Timeouts, run_detached};
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
            // Dropping the awaiting future does not stop the work below.
            run_detached(async move {
                let result = services::body(node, id).await;
                guard.finish(wiring::outcome_of(&result), wiring::failed(&result));
                result
            })
            .await
        })
    }

    delegate_to!(BASE);
}
