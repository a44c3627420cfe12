//! `propagated`: hopbudget at every hop.
//!
//! The inbound budget is read from the wire (`grpc-timeout`, `x-request-timeout-ms`) by the
//! server layer and becomes a local monotonic deadline (C1); a hop with less than its route's
//! minimum budget refuses before any work (C3); the handler stops at the deadline (C4, C7) or
//! when the caller goes away (C5); each outbound call forwards `remaining - margin - transit`
//! (C2), refuses to start below the threshold (C3) and is itself bounded by the budget.
//! Background work gets a deadline of its own, rooted when it is scheduled (C12), carried as
//! `deadline-epoch-ms` and checked by the consumer before any work (S10).
//!
//! The wiring is hopbudget's own layers, as a service would use them: `GrpcServerLayer` /
//! `ServerBudgetLayer` with a profile whose route minimum is the service's `min_budget_ms`,
//! `GrpcClientLayer` and the reqwest `BudgetMiddleware` on the clients. Inside a handler the
//! budget is the ambient `RequestBudget::current()` the server layer installed. A leaf
//! service (it calls nobody, so its hop is its own work) also runs `AdmissionLayer` from its
//! profile's `admission` section inside the server layer: its `concurrency` slots, waiters
//! earliest-deadline-first, each dropped the moment its budget no longer covers the p99 of
//! the service's work (C21, S17; `services::profile_for`).

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use hopbudget::clock::{SystemClock, WallClock};
use hopbudget::codec::{self, Carrier};
use hopbudget::queue::Stamper;
use hopbudget::{HopPolicy, RequestBudget};
use http::HeaderMap;

use crate::demo::collector::BackgroundOutcome;
use crate::demo::hop_error::{self, HopError};
use crate::demo::mode::Mode;
use crate::demo::node::{HopMode, Layers, Node};
use crate::demo::peer::{self, Peer};
use crate::demo::queue::Job;
use crate::demo::services;

/// hopbudget everywhere.
#[derive(Clone, Copy, Debug, Default)]
pub struct Propagated;

impl HopMode for Propagated {
    fn mode(&self) -> Mode {
        Mode::Propagated
    }

    fn layers(&self) -> Layers {
        Layers {
            server: true,
            client: true,
        }
    }

    fn admission(&self) -> bool {
        // The slot queue of a leaf is where an overloaded graph's requests wait: order it by
        // deadline and drop what can no longer finish, rather than first come first served.
        true
    }

    fn admit(&self, node: Arc<Node>, id: u64) -> BoxFuture<'static, Result<u32, HopError>> {
        Box::pin(async move {
            // The server layer read the inbound budget, refused calls below the route minimum
            // before this handler (C3), and installed the budget in the task-local scope; it
            // drops this future at the deadline (C4, C7) or when the caller resets the call
            // (C5), and records which of the two it was on the budget.
            let Some(budget) = RequestBudget::current() else {
                return Err(HopError::Failed(
                    "no request budget: the server layer is missing".into(),
                ));
            };
            let guard = node.collector.arrive(
                node.idx,
                id,
                Some(budget.at_arrival()),
                Some(budget.clone()),
            );
            let result = services::body(node.clone(), id).await;
            guard.finish(hop_error::outcome_of(&result), hop_error::failed(&result));
            result
        })
    }

    fn before_work(&self, node: &Node) -> Result<(), HopError> {
        // After queueing for a slot the work must still fit in what is left (C3, C21).
        match RequestBudget::current() {
            Some(b) => b.admit(node.spec.min_budget()).map_err(HopError::Budget),
            None => Ok(()),
        }
    }

    fn own_work<'a>(
        &'a self,
        _node: &'a Node,
        cost: Duration,
    ) -> BoxFuture<'a, Result<(), HopError>> {
        // The server layer (or the forgetful hop's own `run`) already bounds the whole hop.
        Box::pin(async move {
            tokio::time::sleep(cost).await;
            Ok(())
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
            // The client layers take the ambient budget, refuse locally below the threshold
            // (no connection, no bytes, C3), stamp the forward budget (C2) and bound the wait.
            let result = peer::send(peer, id).await;
            services::count_at_caller(node, callee, &result);
            result
        })
    }

    fn background_headers(&self, node: &Node) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let Some(bg) = &node.spec.background else {
            return headers;
        };
        // Its own deadline, rooted now and linked to the request's budget only for tracing
        // (C12), as an absolute epoch: a message may wait longer than any clock skew.
        let own = Duration::from_millis(bg.deadline_ms);
        let budget = match RequestBudget::current() {
            Some(request) => request.detach(own),
            None => RequestBudget::local(own, node.profile.current().policy()),
        };
        // hopbudget's stamper, as a producer on any broker uses it: what is left after the hop
        // margin and transit allowance (C2), and the origin budget beside it. It refuses only
        // when that is below the refuse threshold (C3); the message then carries a deadline
        // already past, so the consumer drops it before any work.
        let stamper = Stamper::new(&node.profile.current());
        if stamper.stamp_with(&budget, &mut headers).is_err() {
            headers.insert(
                codec::QUEUE_DEADLINE_EPOCH_MS,
                codec::Carrier::Queue
                    .encode(Duration::ZERO, || SystemClock.now_unix_ms())
                    .to_header_value(),
            );
        }
        headers
    }

    fn consume<'a>(&'a self, job: &'a Job) -> BoxFuture<'a, BackgroundOutcome> {
        Box::pin(async move {
            let left = job
                .headers
                .get(codec::QUEUE_DEADLINE_EPOCH_MS)
                .and_then(|v| {
                    Carrier::Queue
                        .decode(v.as_bytes(), || SystemClock.now_unix_ms())
                        .ok()
                });
            // A message that waited past its deadline is dropped before any work (S10).
            let Some(left) = left.filter(|l| !l.is_zero()) else {
                return BackgroundOutcome::DroppedExpired;
            };
            let budget = RequestBudget::from_carrier(Carrier::Queue, left, HopPolicy::DEFAULT);
            match budget.run(tokio::time::sleep(job.work)).await {
                Ok(()) => BackgroundOutcome::Sent,
                Err(_) => BackgroundOutcome::Expired,
            }
        })
    }

    fn client_forward(&self, budget: Duration) -> Option<Duration> {
        // The client is the first hop: it forwards its budget less its own margin and the
        // transit allowance (C2).
        Some(RequestBudget::local(budget, HopPolicy::DEFAULT).forward())
    }
}
