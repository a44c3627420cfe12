//! The producer side of a service's background queue: the in-process channel, or a NATS
//! JetStream subject published to without holding up the handler.

use std::sync::Arc;

use async_nats::jetstream;
use tokio::sync::mpsc;

use super::job::Job;
use crate::demo::collector::{BackgroundOutcome, Collector};

/// The producer side of one service's background queue.
#[derive(Clone, Debug)]
pub enum Producer {
    /// The in-process queue (the default).
    InProcess(mpsc::UnboundedSender<Job>),
    /// A NATS JetStream stream (`--broker`).
    Nats(Arc<Publisher>),
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

/// The producer side of one service's background queue on NATS.
#[derive(Clone, Debug)]
pub struct Publisher {
    pub(super) js: jetstream::Context,
    pub(super) subject: Arc<str>,
    pub(super) collector: Arc<Collector>,
}

impl Publisher {
    /// Publish `job` (headers as the mode stamped them) without holding up the handler that
    /// handed it off; the stream's acknowledgement is awaited in the background.
    pub fn send(&self, job: Job) {
        let mut headers = async_nats::HeaderMap::new();
        for (name, value) in &job.headers {
            if let Ok(value) = value.to_str() {
                headers.insert(name.as_str(), value);
            }
        }
        let payload = format!("{} {}", job.id, job.work.as_micros())
            .into_bytes()
            .into();
        let this = self.clone();
        tokio::spawn(async move {
            let stored = match this
                .js
                .publish_with_headers(this.subject.to_string(), headers, payload)
                .await
            {
                Ok(ack) => ack.await.map(drop),
                Err(e) => Err(e),
            };
            if let Err(e) = stored {
                // Not in the stream, so never consumed: count it as dropped so the run's
                // background figures still add up.
                tracing::warn!(error = %e, subject = %this.subject, "demo background message not stored");
                this.collector
                    .background_done(job.id, BackgroundOutcome::DroppedExpired);
            }
        });
    }
}
