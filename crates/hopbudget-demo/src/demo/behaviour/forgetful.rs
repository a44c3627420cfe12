//! The forgetful service of `--forgetful SERVICE` (S13), in a propagated run: it has no
//! server layer, ignores the inbound deadline, starts a fresh budget of its own default
//! (`timeout_ms`), forwards *that* downstream (the chain break), and its work survives its
//! caller. Below it, every hop is [`Propagated`] again and obeys the reset budget.
//!
//! Only admission and the server layer differ from `propagated`.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use hopbudget::{Deadline, RequestBudget, Source};
use http::HeaderMap;

use super::detached::run_detached;
use super::propagated::Propagated;
use crate::demo::collector::BackgroundOutcome;
use crate::demo::hop_error::{self, HopError};
use crate::demo::mode::Mode;
use crate::demo::node::{HopMode, Layers, Node};
use crate::demo::peer::Peer;
use crate::demo::queue::Job;
use crate::demo::services;

/// What the forgetful hop shares with `propagated`.
static BASE: Propagated = Propagated;

/// A propagated-mode service that ignores inbound deadlines.
#[derive(Clone, Copy, Debug, Default)]
pub struct Forgetful;

impl HopMode for Forgetful {
    fn mode(&self) -> Mode {
        Mode::Propagated
    }

    fn layers(&self) -> Layers {
        Layers {
            server: false,
            client: true,
        }
    }

    fn admit(&self, node: Arc<Node>, id: u64) -> BoxFuture<'static, Result<u32, HopError>> {
        Box::pin(async move {
            let budget = RequestBudget::new(
                Deadline::after(node.spec.timeout()),
                Source::Local,
                node.profile.current().policy(),
            );
            let guard =
                node.collector
                    .arrive(node.idx, id, Some(budget.remaining()), Some(budget.clone()));
            // Nothing stops this work when the caller goes away.
            run_detached(async move {
                let result = match budget.run(services::body(node, id)).await {
                    Ok(r) => r,
                    Err(e) => Err(HopError::Budget(e)),
                };
                guard.finish(hop_error::outcome_of(&result), hop_error::failed(&result));
                result
            })
            .await
        })
    }

    delegate_to!(BASE);
}
