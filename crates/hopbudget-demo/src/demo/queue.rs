//! The background queue of scenario S11: after a successful answer a service hands the
//! order-confirmation e-mail over an in-process queue; workers consume it.
//!
//! The message carries its deadline the way a broker message would, as an absolute
//! `deadline-epoch-ms` header (a message may wait longer than any clock skew), stamped by
//! the producer from a budget rooted when the work was scheduled, *not* from the request's
//! (C12): the e-mail is not cancelled when the response goes out. The consumer checks the
//! deadline before any work and drops a message that waited past it (S10). How each side
//! behaves is the mode's (`HopMode::background_headers`, `HopMode::consume`).
//!
//! The queue is in process by default, so the demo needs nothing installed; with
//! `--broker nats://…` it is a NATS JetStream stream ([`nats`]), consumed through hopbudget's
//! JetStream consumer and its gate.

pub mod nats;

use std::sync::Arc;
use std::time::Duration;

use http::HeaderMap;
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;

use super::collector::Collector;
use super::mode::HopMode;
use super::topology::BackgroundSpec;

/// One queued message.
#[derive(Debug)]
pub struct Job {
    /// The request that scheduled it.
    pub id: u64,
    /// Message headers (the deadline carrier, when the mode stamps one).
    pub headers: HeaderMap,
    /// How long the work takes.
    pub work: Duration,
    /// When it was scheduled.
    pub scheduled: Instant,
}

/// The producer side of one service's background queue.
#[derive(Clone, Debug)]
pub enum Producer {
    /// The in-process queue (the default).
    InProcess(mpsc::UnboundedSender<Job>),
    /// A NATS JetStream stream (`--broker`).
    Nats(Arc<nats::Publisher>),
}

impl Producer {
    /// Hand `job` to the queue. An in-process queue whose workers are gone gives the job back;
    /// on NATS a message the stream does not store is counted by the publisher itself.
    // The same contract as the channel's own `send`, which hands the job back.
    #[allow(clippy::result_large_err)]
    pub fn send(&self, job: Job) -> Result<(), mpsc::error::SendError<Job>> {
        match self {
            Producer::InProcess(tx) => tx.send(job),
            Producer::Nats(publisher) => {
                publisher.send(job);
                Ok(())
            }
        }
    }
}

/// Start the workers of a background queue; returns the producer side.
pub fn start(spec: &BackgroundSpec, mode: Arc<dyn HopMode>, collector: Arc<Collector>) -> Producer {
    let (tx, mut rx) = mpsc::unbounded_channel::<Job>();
    let slots = Arc::new(Semaphore::new(spec.workers as usize));
    tokio::spawn(async move {
        while let Some(job) = rx.recv().await {
            let Ok(permit) = slots.clone().acquire_owned().await else {
                return;
            };
            let (collector, mode) = (collector.clone(), mode.clone());
            tokio::spawn(async move {
                let outcome = mode.consume(&job).await;
                collector.background_done(job.id, outcome);
                drop(permit);
            });
        }
    });
    Producer::InProcess(tx)
}
