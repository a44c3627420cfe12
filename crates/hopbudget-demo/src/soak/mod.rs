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
//! One file per part: `chain.rs` (the services) and `ledger.rs` (what each counts), `mix.rs`
//! (the kinds of request), `overload.rs` (the fixed-capacity leaf), `load.rs` (the load
//! generator), `drain.rs`, `memory.rs`, `report.rs` (the checks), and `options.rs` (what a
//! run is given).

mod chain;
mod drain;
mod ledger;
mod load;
mod memory;
mod mix;
mod options;
mod overload;
mod report;

use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub use memory::{MAX_BYTES_PER_REQUEST, MEMORY_FLOOR, rss_bytes};
pub use options::{SoakArgs, SoakOptions};
pub use report::{Check, SoakReport};

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
