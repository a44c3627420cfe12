//! `timeouts`: what a Rust team has with tonic, axum, reqwest and `tower::timeout` but
//! without hopbudget (S18).
//!
//! Every hop sets its own fresh timeout (the topology's `timeout_ms`) on each outbound call
//! and on its own work, and sends no deadline. The handler runs inline, as tonic and axum run
//! it: when a caller's timeout fires, its call future is dropped, the HTTP/2 stream is reset,
//! and the server drops the callee's handler future, which drops *its* outbound calls in
//! turn. So work stops soon after a caller gives up; but no hop knows how much time the user
//! has left, so nothing refuses work that cannot finish in time, and every timeout below the
//! client is longer than the client's.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use http::HeaderMap;

use crate::demo::collector::BackgroundOutcome;
use crate::demo::hop_error::{self, HopError};
use crate::demo::mode::Mode;
use crate::demo::node::{HopMode, Layers, Node};
use crate::demo::peer::{self, Peer};
use crate::demo::queue::Job;
use crate::demo::services;

/// Per-hop fresh timeouts with drop-cancellation.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timeouts;

impl HopMode for Timeouts {
    fn mode(&self) -> Mode {
        Mode::Timeouts
    }

    fn layers(&self) -> Layers {
        Layers {
            server: false,
            client: false,
        }
    }

    fn admit(&self, node: Arc<Node>, id: u64) -> BoxFuture<'static, Result<u32, HopError>> {
        Box::pin(async move {
            // No budget: the hop knows nothing of the user's time. If the server drops this
            // future (the caller went away), the guard records a cancellation.
            let guard = node.collector.arrive(node.idx, id, None, None);
            let result = services::body(node.clone(), id).await;
            guard.finish(hop_error::outcome_of(&result), hop_error::failed(&result));
            result
        })
    }

    fn before_work(&self, _node: &Node) -> Result<(), HopError> {
        Ok(())
    }

    fn own_work<'a>(
        &'a self,
        node: &'a Node,
        cost: Duration,
    ) -> BoxFuture<'a, Result<(), HopError>> {
        Box::pin(async move {
            tokio::time::timeout(node.spec.timeout(), tokio::time::sleep(cost))
                .await
                .map_err(|_| HopError::TimedOut)
        })
    }

    fn call<'a>(
        &'a self,
        node: &'a Node,
        callee: usize,
        peer: &'a Peer,
        id: u64,
    ) -> BoxFuture<'a, Result<u32, HopError>> {
        Box::pin(async move {
            // `tokio::time::timeout` is what `tower::timeout::Timeout` does per call: race the
            // call against a fresh timer and drop the call when the timer wins.
            match tokio::time::timeout(node.spec.timeout(), peer::send(peer, id)).await {
                Ok(result) => {
                    services::count_at_caller(node, callee, &result);
                    result
                }
                Err(_) => {
                    node.collector.expired(callee);
                    Err(HopError::TimedOut)
                }
            }
        })
    }

    fn background_headers(&self, _node: &Node) -> HeaderMap {
        HeaderMap::new()
    }

    fn consume<'a>(&'a self, job: &'a Job) -> BoxFuture<'a, BackgroundOutcome> {
        Box::pin(async move {
            tokio::time::sleep(job.work).await;
            BackgroundOutcome::Sent
        })
    }

    fn client_forward(&self, _budget: Duration) -> Option<Duration> {
        None
    }
}
