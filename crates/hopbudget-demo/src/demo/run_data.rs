//! What one run recorded ([`RunData`]): the runner fills it, and the results, the step and
//! the timeline read it. Below all of them, so the results need not import the runner.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::collector::Collector;

/// The graph's state at one instant of a run, sampled every `runner::SAMPLE_EVERY`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Since arrivals started.
    pub at: Duration,
    /// Hops waiting for a work slot, every service summed ([`Collector::queued`]).
    pub queued: usize,
    /// Handlers alive, every service summed ([`Collector::in_flight`]).
    pub in_flight: usize,
}

/// What one run recorded.
#[derive(Debug)]
pub struct RunData {
    /// The measurements.
    pub collector: Arc<Collector>,
    /// When arrivals started (client clock).
    pub started: Instant,
    /// Requests sent.
    pub sent: usize,
    /// Work intervals still open when the run was stopped.
    pub cut_off: usize,
    /// Seconds the whole run took.
    pub wall_s: f64,
    /// The queues, sampled from the first arrival to the end of the drain.
    pub samples: Vec<Sample>,
}
