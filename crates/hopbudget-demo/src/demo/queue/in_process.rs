//! The in-process background queue (the default): an unbounded channel and a fixed number of
//! workers, each consuming as the node's mode does.

use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc};

use super::job::Job;
use super::producer::Producer;
use crate::demo::collector::Collector;
use crate::demo::node::HopMode;
use crate::demo::topology::BackgroundSpec;

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
