//! Overload (scenario S17): what deadline-aware admission does for goodput past capacity.
//!
//! Run: `cargo bench -p hopbudget-examples --bench overload` (a measurement of about 90 s, so a
//! bench, not an example)
//! (options: `--seconds N` per point, default 4; `--budget-ms N`, default 200).
//!
//! One real axum service on 127.0.0.1 with a fixed capacity: 4 workers, 20 ms of work each,
//! so 200 requests per second. A client drives it open-loop (arrivals do not wait for
//! answers) at 0.5x to 3x capacity, every request giving up when its fixed budget is spent and
//! telling the server slightly less in `x-request-timeout-ms` (C2: twice the default hop
//! margin and transit, 12 ms, so that the server's deadline falls before the client leaves). Three configurations, each behind
//! hopbudget's server layer (propagated deadlines):
//!
//! - `no admission`: requests wait for a worker in a plain FIFO semaphore inside the
//!   handler until the server layer's deadline stops them (504);
//! - `ConcurrencyLimit`: tower's `ConcurrencyLimit` (4), first come first served, blind to
//!   deadlines;
//! - `AdmissionLayer EDF`: hopbudget's admission (4), earliest deadline first, dropping each
//!   waiter (503) the moment its budget cannot cover the route's cost (50 ms: the work plus
//!   room for the answer's trip back);
//! - `AdmissionLayer adaptive LIFO`: the same with the documented alternative policy.
//!
//! Printed per point: goodput (200 answers that arrived within the budget, per second, and
//! as a share of capacity), the share refused, the p99 latency of admitted requests
//! (every request not refused with 503, whatever its answer), and where the capacity went:
//! admitted requests that did not end as good answers, the time a piece of work really held
//! its worker, and goodput against the capacity that time allows (workers / work time). The target is, at 3x capacity,
//! goodput at least 90% of capacity with the admitted p99 inside the budget.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use hopbudget::admission::{AdmissionLayer, HttpAnswer, QueuePolicy};
use hopbudget::http::server::ServerBudgetLayer;
use hopbudget::{HopPolicy, Profile};
use tokio::sync::Semaphore;
use tokio::time::{Instant, MissedTickBehavior};
use tower::ServiceBuilder;
use tower::limit::ConcurrencyLimitLayer;

const WORKERS: usize = 4;
const WORK: Duration = Duration::from_millis(20);
const CAPACITY: f64 = WORKERS as f64 / 0.020;
const LOADS: [f64; 5] = [0.5, 1.0, 1.5, 2.0, 3.0];

/// The route needs its 20 ms of work plus 30 ms for the answer to travel back on a busy
/// machine: the server layer refuses arrivals below it, and admission uses it as the route's
/// cost.
const PROFILE: &str = "service: overload
routes:
  - path: /work
    min_budget_ms: 50
admission:
  limit: 4
  queue_bound: 4096
";

#[derive(Clone, Copy, Debug)]
enum Config {
    NoAdmission,
    ConcurrencyLimit,
    Admission,
    AdmissionLifo,
}

impl Config {
    const ALL: [Config; 4] = [
        Config::NoAdmission,
        Config::ConcurrencyLimit,
        Config::Admission,
        Config::AdmissionLifo,
    ];

    fn name(self) -> &'static str {
        match self {
            Config::NoAdmission => "no admission",
            Config::ConcurrencyLimit => "ConcurrencyLimit (FIFO)",
            Config::Admission => "AdmissionLayer EDF",
            Config::AdmissionLifo => "AdmissionLayer adaptive LIFO",
        }
    }
}

/// What the workers did: how long they were busy in total, and how many pieces of work.
#[derive(Debug, Default)]
struct Busy {
    micros: AtomicU64,
    done: AtomicU64,
}

/// The service: a handler that needs one of `WORKERS` workers for `WORK`.
async fn serve(config: Config, profile: &Profile, busy: Arc<Busy>) -> String {
    let workers = Arc::new(Semaphore::new(WORKERS));
    let work = get(move || {
        let workers = workers.clone();
        let busy = busy.clone();
        async move {
            let _worker = workers.acquire().await.expect("never closed");
            // How long the work really holds the worker: a 20 ms sleep ends on the timer's
            // next millisecond tick after 20 ms, and later still when the runtime is busy.
            let began = Instant::now();
            tokio::time::sleep(WORK).await;
            busy.micros
                .fetch_add(began.elapsed().as_micros() as u64, Ordering::Relaxed);
            busy.done.fetch_add(1, Ordering::Relaxed);
            "done"
        }
    });
    let server = ServerBudgetLayer::new(profile.clone());
    let router = Router::new().route("/work", work);
    let router = match config {
        Config::NoAdmission => router.layer(server),
        Config::ConcurrencyLimit => router.layer(
            ServiceBuilder::new()
                .layer(server)
                .layer(ConcurrencyLimitLayer::new(WORKERS)),
        ),
        Config::Admission => router.layer(
            ServiceBuilder::new()
                .layer(server)
                .layer(AdmissionLayer::from_profile(profile).expect("admission section")),
        ),
        Config::AdmissionLifo => {
            // The same section with the documented alternative policy.
            let config = profile
                .admission()
                .expect("admission section")
                .clone()
                .with_policy(QueuePolicy::AdaptiveLifo {
                    after: Duration::from_millis(50),
                });
            let admission =
                AdmissionLayer::with_answer(config, HttpAnswer::new(*profile.http_status()));
            router.layer(ServiceBuilder::new().layer(server).layer(admission))
        }
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}/work")
}

/// One request's fate, as the client saw it.
#[derive(Clone, Copy, Debug)]
enum Fate {
    /// An answer with this status after this long.
    Answer(u16, Duration),
    /// The client's budget ran out first.
    GaveUp(Duration),
}

struct Point {
    goodput: f64,
    refused: f64,
    admitted_p99: Option<Duration>,
    /// Admitted requests that did not end as good answers: late 200s, 504s, given up.
    admitted_lost: f64,
}

async fn drive(url: &str, rate: f64, budget: Duration, seconds: f64, busy: &Busy) -> Point {
    let client = reqwest::Client::builder()
        .timeout(budget)
        // One multiplexed connection: a request that gives up resets its stream (the server
        // drops its work, C5) instead of tearing down a connection the next one must rebuild.
        .http2_prior_knowledge()
        .build()
        .expect("a reqwest client");
    let warmup = Duration::from_millis(500);
    let total = warmup + Duration::from_secs_f64(seconds);
    let forward = budget.saturating_sub(HopPolicy::DEFAULT.reserve() * 2);
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    tick.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let start = Instant::now();
    let mut calls = Vec::new();
    let mut reset = false;
    loop {
        let sent = tick.tick().await;
        if sent - start >= total {
            break;
        }
        if !reset && sent - start >= warmup {
            // Count the workers' time over the measured arrivals only.
            busy.micros.store(0, Ordering::Relaxed);
            busy.done.store(0, Ordering::Relaxed);
            reset = true;
        }
        // Like any hopbudget client, it tells the server less than it will wait itself (C2):
        // the server's deadline must fall before the client gives up, transit included.
        let req = client
            .get(url)
            .header("x-request-timeout-ms", forward.as_millis().to_string());
        let measured = sent - start >= warmup;
        calls.push((
            measured,
            tokio::spawn(async move {
                let began = Instant::now();
                match req.send().await {
                    Ok(res) => {
                        let status = res.status().as_u16();
                        // The answer counts once its body has arrived.
                        let _ = res.bytes().await;
                        Fate::Answer(status, began.elapsed())
                    }
                    Err(_) => Fate::GaveUp(began.elapsed()),
                }
            }),
        ));
    }
    let mut good = 0usize;
    let mut lost = 0usize;
    let mut refused = 0usize;
    let mut measured_count = 0usize;
    let mut admitted = Vec::new();
    for (measured, call) in calls {
        let Ok(fate) = call.await else { continue };
        if !measured {
            continue;
        }
        measured_count += 1;
        match fate {
            Fate::Answer(503, _) => refused += 1,
            Fate::Answer(status, took) => {
                if status == 200 && took <= budget {
                    good += 1;
                } else {
                    lost += 1;
                }
                admitted.push(took);
            }
            Fate::GaveUp(took) => {
                lost += 1;
                admitted.push(took);
            }
        }
    }
    admitted.sort();
    let admitted_p99 = (!admitted.is_empty())
        .then(|| admitted[((admitted.len() as f64 * 0.99).ceil() as usize).saturating_sub(1)]);
    Point {
        goodput: good as f64 / seconds,
        refused: refused as f64 / measured_count.max(1) as f64,
        admitted_p99,
        admitted_lost: lost as f64 / seconds,
    }
}

fn arg(name: &str, default: f64) -> f64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} takes a number, got `{v}`"))
        })
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let seconds = arg("--seconds", 4.0);
    let budget = Duration::from_millis(arg("--budget-ms", 200.0) as u64);
    let profile = Profile::from_yaml(PROFILE, "overload profile").expect("a valid profile");
    println!(
        "capacity {CAPACITY:.0} req/s ({WORKERS} workers x {} ms), client budget {} ms, {seconds} s per point\n",
        WORK.as_millis(),
        budget.as_millis()
    );
    println!(
        "| configuration | load | goodput (req/s) | goodput / capacity | refused | admitted p99 | admitted, not good (req/s) | work per request | goodput / measured capacity |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for config in Config::ALL {
        for load in LOADS {
            let busy = Arc::new(Busy::default());
            let url = serve(config, &profile, busy.clone()).await;
            let point = drive(&url, load * CAPACITY, budget, seconds, &busy).await;
            // What the workers can really do: WORKERS over the time a piece of work really
            // holds one (the timer rounds a sleep up to its next millisecond tick, and wakes
            // it later still on a busy machine).
            let done = busy.done.load(Ordering::Relaxed);
            let busy_us = busy.micros.load(Ordering::Relaxed) as f64;
            let per_request = busy_us / 1e3 / done.max(1) as f64;
            let measured = if done == 0 {
                "-".to_owned()
            } else {
                let capacity = WORKERS as f64 * 1e3 / per_request;
                format!("{:.0}% of {capacity:.0}", 100.0 * point.goodput / capacity)
            };
            let p99 = point.admitted_p99.map_or("-".to_owned(), |d| {
                let ms = d.as_secs_f64() * 1e3;
                let mark = if d <= budget { "" } else { " (over budget)" };
                format!("{ms:.0} ms{mark}")
            });
            println!(
                "| {} | {load}x | {:.0} | {:.0}% | {:.0}% | {p99} | {:.1} | {per_request:.2} ms | {measured} |",
                config.name(),
                point.goodput,
                100.0 * point.goodput / CAPACITY,
                100.0 * point.refused,
                point.admitted_lost,
            );
            // Let the last requests' connections close before the next point.
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}
