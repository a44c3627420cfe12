//! `hopbudget-demo demo`: the checkout call graph of scenario S7 as real services on loopback,
//! run once per mode over the same seeded arrival schedule and compared side by side (S18):
//! `detached` (per-hop timeouts, work survives its caller: the seeds' incident), `timeouts`
//! (per-hop timeouts with Rust's drop-cancellation) and `propagated` (hopbudget).
//!
//! - [`topology`]: the YAML file describing the graph (built in: `topologies/checkout.yaml`).
//! - [`mode`]: a mode's name; [`behaviour`]: what each mode does, one file per mode.
//! - [`node`]: one running service and the trait its mode implements ([`node::HopMode`]).
//! - [`services`]: the hop body every mode shares, and a service's settings.
//! - [`server`]: a node as a real gRPC (tonic) or HTTP (axum) server on its own port;
//!   [`answer`]: how it spells a [`hop_error::HopError`]; [`peer`]: how it calls the services
//!   below; [`wire`]: the names on the wire.
//! - [`queue`]: the background queue (in process or NATS).
//! - [`runner`]: one mode's run: services up, open-loop arrivals, drain, stop.
//! - [`collector`], [`results`]: what is measured and how it is summarised.
//! - [`sweep`]: the load sweep (0.5x to 3x capacity) and its table.
//! - [`tail`]: the heavy-tailed callee with and without hedging (S21).
//! - [`step`]: the step to overload (1x to 2x or 3x capacity at once, and back) and how long
//!   each mode takes to settle.
//! - [`report`]: the side-by-side table, the HTML report with charts, the JSON.
//! - [`traces`]: each mode's spans exported by the library as OTLP JSON, trace context on
//!   the wire.
//!
//! [`run`] is the whole demo as a library call (the integration tests use it).

pub mod answer;
pub mod behaviour;
pub mod client_retries;
pub mod collector;
pub mod hop_error;
pub mod mode;
pub mod node;
mod options;
pub mod peer;
pub mod queue;
pub mod report;
pub mod results;
pub mod retry_wave;
pub mod run_data;
pub mod runner;
pub mod server;
pub mod services;
pub mod step;
pub mod sweep;
pub mod table;
pub mod tail;
pub mod timeline;
pub mod topology;
pub mod traces;
pub mod wire;

use std::path::PathBuf;
use std::time::Duration;

pub use mode::Mode;
pub use options::DemoOptions;
pub use results::{DemoResults, ModeResult, SweepPoint};
pub use topology::Topology;

/// Run the demo. Synchronous: it starts its own runtimes (one per run), so call it from
/// plain code, not from inside a tokio runtime.
pub fn run(opts: &DemoOptions) -> Result<(DemoResults, Vec<runner::RunData>), String> {
    let topo = &opts.topology;
    if let Some(name) = &opts.forgetful
        && topo.service(name).is_none()
    {
        return Err(format!(
            "--forgetful {name}: no such service in the topology (services: {})",
            topo.services
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if let Some(url) = &opts.broker
        && url.strip_prefix("nats://").is_none_or(str::is_empty)
    {
        return Err(format!(
            "--broker {url}: expected a NATS URL, nats://HOST:PORT (the only broker the demo \
             speaks); leave --broker out to use the in-process queue"
        ));
    }
    let rate = opts.rate_per_s.unwrap_or(topo.client.rate_per_s);
    let duration = opts
        .duration
        .unwrap_or_else(|| Duration::from_secs_f64(topo.client.duration_s));
    if !(rate.is_finite() && rate > 0.0 && rate <= 10_000.0) {
        return Err(format!(
            "--rate must be above 0 and at most 10000 (got {rate})"
        ));
    }
    let mut modes = Vec::new();
    let mut raw = Vec::new();
    for &mode in &opts.modes {
        let spec = runner::RunSpec {
            mode,
            rate_per_s: rate,
            duration,
            forgetful: opts.forgetful.clone(),
            drain_limit: opts.drain_limit,
            progress: opts.progress,
            label: format!("{} mode", mode.as_str()),
            broker: opts.broker.clone(),
            arrivals: None,
            retries: None,
        };
        let trace_file = opts.traces.as_deref().map(|d| traces::path_for(d, mode));
        let data = runner::run_traced(topo, &spec, trace_file.as_deref())?;
        modes.push(results::summarise(
            topo,
            mode,
            opts.forgetful.clone(),
            rate,
            duration,
            &data,
        ));
        raw.push(data);
    }
    // One request, the same in every mode, drawn as a timeline in the report.
    if let Some(id) = raw.first().and_then(results::pick_request) {
        for (m, data) in modes.iter_mut().zip(&raw) {
            m.timeline = results::timeline(topo, data, id);
        }
    }
    let capacity = topo.capacity_per_s();
    let sweep = if opts.sweep {
        sweep::run(opts, capacity)?
    } else {
        Vec::new()
    };
    Ok((
        DemoResults {
            budget_ms: topo.client.budget_ms,
            client_timeout_ms: topo.client.timeout_ms,
            capacity_per_s: capacity,
            bottleneck: topo.bottleneck().name.clone(),
            modes,
            sweep,
            topology: topo.clone(),
        },
        raw,
    ))
}

/// Where the demo writes its files.
pub fn default_out_dir() -> PathBuf {
    PathBuf::from("target/hopbudget-demo")
}
