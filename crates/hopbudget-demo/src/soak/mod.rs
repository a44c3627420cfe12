//! `hopbudget-demo soak`: a bounded, fixed-rate run of a three-hop chain on loopback that checks
//! the library leaks nothing and loses nothing over time.
//!
//! The chain is `edge -> mid -> leaf`, three axum services, each behind
//! [`ServerBudgetLayer`](hopbudget::http::server::ServerBudgetLayer) and calling the next with
//! reqwest through [`BudgetMiddleware`](hopbudget::http::reqwest::BudgetMiddleware). A load
//! generator sends a fixed mix of requests at a fixed rate (open loop: a slow answer does
//! not slow the sender): good ones, short ones the leaf refuses (C3), expiring ones whose leaf
//! work outlives the budget (C4), cancelled ones the client abandons mid-flight (C5), and
//! malformed ones the edge rejects (C9). Every hop counts what arrived and how each request
//! ended, from a guard outside the budget layer that also sees requests hyper drops.
//!
//! At the end the run checks, and the command exits non-zero when any check fails:
//!
//! - **nothing lost**, per hop: `arrived = completed + refused + expired + cancelled +
//!   malformed`, and nothing is still in flight once the chain drains;
//! - **nothing left running**: tokio's live task count returns to its value before the load,
//!   and no hop future (each owns at most one deadline timer) is alive; tokio's stable
//!   metrics do not count timers, so a live hop future is the proxy for a pending timer;
//! - **memory flat**: resident memory sampled once a second shows no steady slope in the
//!   second half of the run after its warm-up: a least-squares line through those samples may
//!   rise by at most [`MAX_BYTES_PER_REQUEST`] per request sent, unless all it rises there is
//!   within [`MEMORY_FLOOR`] (a few pages of allocator noise). Pools and caches fill up early
//!   and level off; a leak keeps the same slope to the end. A fixed-size cost levels off and
//!   passes; a per-request leak, however small, keeps the slope up and fails a long run. The
//!   load generator keeps its own latency record in a fixed-size histogram for the same
//!   reason: a list of every request's latency is itself 16 bytes a request.
//!
//! With `--overload FACTOR` the mix is all good requests and the leaf gets a fixed capacity
//! (a concurrency limit and a fixed amount of work per request); the rate is FACTOR times that
//! capacity. The leaf runs hopbudget's admission layer inside its server layer, as the demo's
//! propagated leaves do (`hopbudget-demo demo --sweep`): its slots are the admission limit, waiters
//! are served earliest-deadline-first, and each is refused the moment its budget no longer
//! covers the work plus the answer's way back (C3, C21). So refusals rise with the load while
//! goodput (answers within budget per second) holds near capacity, and memory stays bounded.
//!
//! One file per part: [`chain`] (the services and their [`ledger`]s), [`mix`] (the kinds of
//! request), [`overload`] (the fixed-capacity leaf), [`load`] (the load generator),
//! [`drain`], [`memory`] and [`report`] (the checks).

mod chain;
mod drain;
mod ledger;
mod load;
mod memory;
mod mix;
mod overload;
mod report;

use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub use memory::{MAX_BYTES_PER_REQUEST, MEMORY_FLOOR, rss_bytes};
use overload::capacity_per_s;

/// `hopbudget-demo soak` arguments.
#[derive(Debug, clap::Args)]
pub struct SoakArgs {
    /// Seconds of load (then the chain drains and the checks run).
    #[arg(long, default_value_t = 600.0)]
    pub duration: f64,
    /// Requests per second sent to the edge (ignored with --overload).
    #[arg(long, default_value_t = 100.0)]
    pub rate: f64,
    /// Seconds at the start whose memory samples are warm-up (default: a quarter of the run,
    /// at least 2 and at most 120).
    #[arg(long)]
    pub warmup: Option<f64>,
    /// Overload mode: all good requests, the leaf at a fixed capacity, and this multiple of
    /// that capacity offered.
    #[arg(long, value_name = "FACTOR")]
    pub overload: Option<f64>,
}

/// What `run` needs, validated.
#[derive(Clone, Debug)]
pub struct SoakOptions {
    /// Length of the load.
    pub duration: Duration,
    /// Arrivals per second.
    pub rate: f64,
    /// Memory samples before this are warm-up.
    pub warmup: Duration,
    /// Overload factor, if in overload mode.
    pub overload: Option<f64>,
}

impl SoakOptions {
    /// Validate command-line arguments.
    pub fn from_args(args: &SoakArgs) -> Result<Self, String> {
        if !(args.duration.is_finite() && args.duration > 0.0 && args.duration <= 86_400.0) {
            return Err(format!(
                "--duration must be above 0 and at most 86400 s (got {})",
                args.duration
            ));
        }
        let rate = match args.overload {
            Some(f) if !(f.is_finite() && f > 0.0 && f <= 20.0) => {
                return Err(format!(
                    "--overload must be above 0 and at most 20 (got {f})"
                ));
            }
            Some(f) => f * capacity_per_s(),
            None if !(args.rate.is_finite() && args.rate > 0.0 && args.rate <= 20_000.0) => {
                return Err(format!(
                    "--rate must be above 0 and at most 20000 (got {})",
                    args.rate
                ));
            }
            None => args.rate,
        };
        let warmup = match args.warmup {
            Some(w) if !(w.is_finite() && w >= 0.0 && w < args.duration) => {
                return Err(format!(
                    "--warmup must be at least 0 and below --duration (got {w})"
                ));
            }
            Some(w) => w,
            None => (args.duration / 4.0).clamp(2.0f64.min(args.duration / 2.0), 120.0),
        };
        Ok(Self {
            duration: Duration::from_secs_f64(args.duration),
            rate,
            warmup: Duration::from_secs_f64(warmup),
            overload: args.overload,
        })
    }
}

/// One check and whether it held.
#[derive(Debug, Clone)]
pub struct Check {
    /// What was checked.
    pub name: String,
    /// Whether it held.
    pub ok: bool,
    /// The figures behind it.
    pub detail: String,
}

/// The result of a soak run.
#[derive(Debug, Clone)]
pub struct SoakReport {
    /// The report as text.
    pub text: String,
    /// Every check.
    pub checks: Vec<Check>,
}

impl SoakReport {
    /// Whether every check held.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }
}

/// `hopbudget-demo soak`: run, print the report, and exit 1 when a check failed (2 for bad
/// arguments or a chain that could not start).
pub fn main(args: &SoakArgs) -> std::process::ExitCode {
    let report = SoakOptions::from_args(args).and_then(|opts| run(&opts));
    match report {
        Ok(report) => {
            print!("{}", report.text);
            if report.passed() {
                std::process::ExitCode::SUCCESS
            } else {
                eprintln!("hopbudget-demo soak: a check failed");
                std::process::ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("hopbudget-demo soak: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

/// Run the soak and report; `Err` only when the chain could not be set up.
pub fn run(opts: &SoakOptions) -> Result<SoakReport, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(run_async(opts))
}

async fn run_async(opts: &SoakOptions) -> Result<SoakReport, String> {
    let stop = CancellationToken::new();
    let chain = chain::Chain::start(opts.overload.is_some(), stop.clone()).await?;
    // Memory, once a second, for the whole run.
    let sampler = memory::Sampler::start(stop.clone());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let tasks_before = drain::alive_tasks();
    let rss_start = rss_bytes();
    let client = chain::reqwest_client();
    let load = load::send(opts, &client, chain.edge.addr).await?;
    let drained = drain::drain(&chain, client, tasks_before).await;
    let rss_end = rss_bytes();
    stop.cancel();
    let memory = memory::Memory {
        samples: sampler.finish().await,
        start: rss_start,
        end: rss_end,
    };
    Ok(report::report(opts, &chain, &load, &drained, &memory))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_reject_nonsense() {
        let args = |duration, rate, overload| SoakArgs {
            duration,
            rate,
            warmup: None,
            overload,
        };
        assert!(SoakOptions::from_args(&args(0.0, 10.0, None)).is_err());
        assert!(SoakOptions::from_args(&args(10.0, f64::NAN, None)).is_err());
        assert!(SoakOptions::from_args(&args(10.0, 10.0, Some(-1.0))).is_err());
        let o = SoakOptions::from_args(&args(10.0, 10.0, Some(3.0))).unwrap();
        assert_eq!(o.rate, 3.0 * capacity_per_s());
        assert_eq!(o.warmup, Duration::from_millis(2500));
    }
}
