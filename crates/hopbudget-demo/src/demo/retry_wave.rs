//! The retry wave over real sockets (`demo --retry-wave`, issue #48 item 4): the checkout
//! graph at 3x its capacity in propagated mode, the client retrying its calls to the edge
//! with the library's [`DeadlineRetry`](hopbudget::retry::DeadlineRetry), without and with
//! its [`AdaptiveThrottle`](hopbudget::throttle::AdaptiveThrottle), beside a client that
//! does not retry; and how many attempts each sent per call it made and per call answered.
//! The retrying client itself is [`ClientRetries`], in `client_retries.rs`.
//!
//! The retries sit where the paused-clock bench (`benches/retry_wave.rs` in `hopbudget`)
//! puts them: on the calls a user makes to the callee (here the edge, and the whole graph
//! behind it), up to 2 retries sent at once, under the client's budget (500 ms in the
//! checkout graph, as in the bench), with the throttle on the retries only.

use std::fmt::Write as _;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::mode::Mode;
use super::options::DemoOptions;
use super::runner;

pub use super::client_retries::{ClientRetries, MAX_RETRIES, Retrying};

/// The overload, as a multiple of the graph's capacity (the bench's).
pub const LOAD_FACTOR: f64 = 3.0;

/// One way of retrying through the wave.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WaveRun {
    /// How the client retried.
    pub retrying: Retrying,
    /// Calls the user made.
    pub calls: u64,
    /// Attempts the client sent.
    pub attempts: u64,
    /// Calls answered within the budget.
    pub answered: u64,
}

impl WaveRun {
    /// Attempts sent per call the user made.
    pub fn amplification(&self) -> f64 {
        self.attempts as f64 / self.calls.max(1) as f64
    }

    /// Attempts sent per call answered.
    pub fn per_answered(&self) -> f64 {
        self.attempts as f64 / self.answered.max(1) as f64
    }
}

/// The checkout graph of `opts` at [`LOAD_FACTOR`] times its capacity for `duration`, in
/// propagated mode, once per way of retrying in `ways`, over the same seeded arrivals.
pub fn run(
    opts: &DemoOptions,
    duration: Duration,
    ways: &[Retrying],
) -> Result<Vec<WaveRun>, String> {
    let topo = &opts.topology;
    let rate = topo.capacity_per_s() * LOAD_FACTOR;
    let mut out = Vec::new();
    for &retrying in ways {
        let retries = ClientRetries::new(retrying);
        let spec = runner::RunSpec {
            mode: Mode::Propagated,
            rate_per_s: rate,
            duration,
            forgetful: None,
            drain_limit: Duration::from_secs(2),
            progress: opts.progress,
            label: format!("retry wave, {}", retrying.as_str()),
            broker: opts.broker.clone(),
            arrivals: None,
            retries: Some(retries.clone()),
        };
        let data = runner::run(topo, &spec)?;
        let answered = data.collector.clients().values().filter(|c| c.ok).count();
        out.push(WaveRun {
            retrying,
            calls: data.sent as u64,
            attempts: retries.attempts(),
            answered: answered as u64,
        });
    }
    Ok(out)
}

/// The runs as a text table with its caption.
pub fn text(runs: &[WaveRun], opts: &DemoOptions, duration: Duration) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Retry wave: the graph at {LOAD_FACTOR}x capacity ({:.0} calls/s) for {:.0} s, \
         propagated mode, up to {MAX_RETRIES} retries of the client's calls to the edge\n",
        opts.topology.capacity_per_s() * LOAD_FACTOR,
        duration.as_secs_f64()
    );
    let _ = writeln!(
        s,
        "{:<28} {:>7} {:>9} {:>9} {:>14} {:>16}",
        "client", "calls", "attempts", "answered", "amplification", "sent / answered"
    );
    for r in runs {
        let _ = writeln!(
            s,
            "{:<28} {:>7} {:>9} {:>9} {:>14.2} {:>16.2}",
            r.retrying.as_str(),
            r.calls,
            r.attempts,
            r.answered,
            r.amplification(),
            r.per_answered()
        );
    }
    s
}
