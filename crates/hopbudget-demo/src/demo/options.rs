//! What to run ([`DemoOptions`]): below the runs that read it (the demo, the sweep, the
//! step, the retry wave), so none of them imports the demo's top.

use std::path::PathBuf;
use std::time::Duration;

use super::mode::Mode;
use super::topology::Topology;

/// What to run.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    /// The graph.
    pub topology: Topology,
    /// Modes to run, in order.
    pub modes: Vec<Mode>,
    /// Arrivals per second (default: the topology's).
    pub rate_per_s: Option<f64>,
    /// Seconds of arrivals per mode (default: the topology's).
    pub duration: Option<Duration>,
    /// Also run the load sweep (0.5x to 3x capacity).
    pub sweep: bool,
    /// Seconds of arrivals per sweep point and mode.
    pub sweep_duration: Duration,
    /// The service that ignores inbound deadlines (S13).
    pub forgetful: Option<String>,
    /// Longest wait for left-behind work after the last client is done.
    pub drain_limit: Duration,
    /// Show progress bars (drawn only when stdout is a terminal).
    pub progress: bool,
    /// Export each mode's spans to `traces-<mode>.otlp.jsonl` in this directory
    /// ([`traces`](super::traces)); the sweep's runs are not traced.
    pub traces: Option<PathBuf>,
    /// Carry the background queue (the order-confirmation e-mail) over this NATS server
    /// with JetStream (`nats://host:port`) instead of in process.
    pub broker: Option<String>,
}

impl DemoOptions {
    /// The defaults for a topology: every mode, its rate and duration, no sweep.
    pub fn new(topology: Topology) -> Self {
        Self {
            topology,
            modes: Mode::ALL.to_vec(),
            rate_per_s: None,
            duration: None,
            sweep: false,
            sweep_duration: Duration::from_secs(4),
            forgetful: None,
            drain_limit: Duration::from_secs(6),
            progress: false,
            traces: None,
            broker: None,
        }
    }
}
