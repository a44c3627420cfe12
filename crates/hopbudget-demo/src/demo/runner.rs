//! One run of one mode: start every service on its own loopback port, replay the seeded
//! open-loop arrival schedule against the edge, wait for the work to drain, stop everything.
//!
//! Each run gets its own tokio runtime, which is shut down at the end: work still running
//! after the drain limit (only possible where work survives its caller) is stopped there and counted up
//! to that moment, so the figure for wasted work is a lower bound.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rand::{Rng, SeedableRng, rngs::StdRng};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::client_retries::ClientRetries;
use super::collector::Collector;
use super::hop_error::HopError;
use super::mode::Mode;
use super::node::Node;
use super::queue;
pub use super::run_data::{RunData, Sample};
use super::services;
use super::topology::{Protocol, Topology};
use super::traces::RunTraces;
use super::wire::{HTTP_PATH, REQUEST_ID};
use super::{peer, server};
use crate::proto::HopRequest;
use crate::proto::hop_client::HopClient;

/// What one run needs.
#[derive(Clone, Debug)]
pub struct RunSpec {
    /// Mode.
    pub mode: Mode,
    /// Arrivals per second.
    pub rate_per_s: f64,
    /// Seconds of arrivals.
    pub duration: Duration,
    /// The service that ignores inbound deadlines (S13), if any.
    pub forgetful: Option<String>,
    /// Longest wait for detached work after the last client is done.
    pub drain_limit: Duration,
    /// Show a progress bar (only drawn when stdout is a terminal).
    pub progress: bool,
    /// Label for the progress bar.
    pub label: String,
    /// The NATS server carrying the background queue (`nats://…`); `None`: in process.
    pub broker: Option<String>,
    /// Arrival offsets to replay instead of the seeded Poisson schedule at `rate_per_s` for
    /// `duration` (the step to overload, [`step`](super::step), gives its own).
    pub arrivals: Option<Arc<[Duration]>>,
    /// The client's retries of its calls to the edge ([`retry_wave`](super::retry_wave));
    /// `None`: one attempt per call, uncounted.
    pub retries: Option<ClientRetries>,
}

/// How often a run samples its queues.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(50);

/// The seeded open-loop schedule: Poisson arrivals at `rate` for `duration`, as offsets.
pub fn schedule(seed: u64, rate: f64, duration: Duration) -> Vec<Duration> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut t = 0.0;
    let mut out = Vec::new();
    let end = duration.as_secs_f64();
    loop {
        let u: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
        t += -u.ln() / rate;
        if t >= end {
            return out;
        }
        out.push(Duration::from_secs_f64(t));
    }
}

/// Run one mode to completion.
pub fn run(topo: &Topology, spec: &RunSpec) -> Result<RunData, String> {
    run_traced(topo, spec, None)
}

/// Run one mode to completion; with `traces`, the services' spans are exported to that file
/// as OTLP JSON by the library's exporter (see [`traces`](super::traces)).
pub fn run_traced(
    topo: &Topology,
    spec: &RunSpec,
    traces: Option<&Path>,
) -> Result<RunData, String> {
    let traces = traces.map(RunTraces::create).transpose()?;
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(2).enable_all();
    if let Some(t) = &traces {
        // This run's subscriber on every thread of its runtime, and on no other thread.
        let dispatch = t.dispatch().clone();
        builder
            .on_thread_start(move || super::traces::enter_thread(&dispatch))
            .on_thread_stop(super::traces::leave_thread);
    }
    let rt = builder
        .build()
        .map_err(|e| format!("cannot start the tokio runtime: {e}"))?;
    let wall = std::time::Instant::now();
    // `block_on` polls the client on this thread: the run's subscriber here too.
    let result = match &traces {
        Some(t) => {
            tracing::dispatcher::with_default(t.dispatch(), || rt.block_on(run_async(topo, spec)))
        }
        None => rt.block_on(run_async(topo, spec)),
    };
    // Dropping the runtime stops detached work that outlived the drain limit; its work
    // guards record the moment it stopped.
    rt.shutdown_timeout(Duration::from_millis(500));
    if let Some(t) = traces {
        t.finish()?;
    }
    result.map(|mut d| {
        d.wall_s = wall.elapsed().as_secs_f64();
        d
    })
}

async fn run_async(topo: &Topology, spec: &RunSpec) -> Result<RunData, String> {
    let collector = Arc::new(Collector::new(
        topo.services.len(),
        Duration::from_millis(topo.client.budget_ms),
    ));
    let stop = CancellationToken::new();
    let listeners = server::bind_all(topo, |_| SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .map_err(|e| e.to_string())?;
    let addrs: Vec<SocketAddr> = listeners.iter().map(|(_, a)| *a).collect();
    let http = peer::reqwest_client()?;
    let broker = match &spec.broker {
        Some(url) => Some(queue::nats::Broker::connect(url).await?),
        None => None,
    };
    for (idx, (listener, _)) in listeners.into_iter().enumerate() {
        let s = &topo.services[idx];
        let profile = services::profile_for(s).map_err(|e| format!("{}: {e}", s.name))?;
        let behaviour = spec
            .mode
            .behaviour(spec.forgetful.as_deref() == Some(s.name.as_str()));
        let background = match (&s.background, &broker) {
            (Some(bg), Some(broker)) => Some(queue::Producer::Nats(Arc::new(
                broker
                    .start(&s.name, bg, behaviour.clone(), collector.clone(), &profile)
                    .await?,
            ))),
            (Some(bg), None) => Some(queue::in_process::start(
                bg,
                behaviour.clone(),
                collector.clone(),
            )),
            (None, _) => None,
        };
        let profile = hopbudget::SharedProfile::new(profile);
        let node = Arc::new(Node {
            idx,
            spec: s.clone(),
            sem: Semaphore::new(s.concurrency as usize),
            peers: peer::peers_for(topo, s, behaviour.layers().client, &profile, &addrs, &http)?,
            collector: collector.clone(),
            profile: profile.clone(),
            seed: topo.client.seed,
            degrade: services::degrade_for(s),
            queue: background,
            behaviour,
        });
        server::spawn_server(node, listener, stop.clone());
    }
    let edge = topo
        .index_of(&topo.edge().name)
        .ok_or("the topology has no edge service")?;
    let client = EdgeClient::new(topo.edge().protocol, addrs[edge])?;
    let arrivals = match &spec.arrivals {
        Some(given) => given.to_vec(),
        None => schedule(topo.client.seed, spec.rate_per_s, spec.duration),
    };
    let sent = arrivals.len();
    let bar = progress_bar(spec, sent as u64);
    let budget = Duration::from_millis(topo.client.budget_ms);
    let give_up = Duration::from_millis(topo.client.timeout_ms);
    // What the client sends is the mode's decision, like everything a hop does.
    let forward = spec.mode.behaviour(false).client_forward(budget);
    let _ = tokio::time::timeout(Duration::from_secs(2), client.call(0, forward)).await;
    let started = Instant::now();
    let sampler = tokio::spawn(sample(collector.clone(), started, stop.clone()));
    let mut tasks = Vec::with_capacity(sent);
    for (i, at) in arrivals.into_iter().enumerate() {
        tokio::time::sleep_until(started + at).await;
        let id = i as u64 + 1;
        let (client, collector, bar) = (client.clone(), collector.clone(), bar.clone());
        let retries = spec.retries.clone();
        tasks.push(tokio::spawn(async move {
            collector.client_start(id, Instant::now());
            let call = async {
                match &retries {
                    Some(r) => {
                        r.call(budget, forward.is_some(), |f| client.call(id, f))
                            .await
                    }
                    None => client.call(id, forward).await,
                }
            };
            // The client gives up at its timeout: the call is dropped, its stream reset.
            match tokio::time::timeout(give_up, call).await {
                Err(_) => {
                    collector.expired(edge);
                    collector.client_end(id, false, true, false);
                }
                Ok(Ok(degraded)) => collector.client_end(id, true, false, degraded > 0),
                Ok(Err(e)) => {
                    match e.outcome() {
                        hopbudget::Outcome::Refused => {
                            collector.refused(edge);
                            collector.client_refused(id);
                        }
                        hopbudget::Outcome::Expired => collector.expired(edge),
                        _ => {}
                    }
                    collector.client_end(id, false, false, false);
                }
            }
            bar.inc(1);
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    bar.set_message("draining work left behind");
    let drain_until = Instant::now() + spec.drain_limit;
    while (collector.in_flight() > 0 || collector.working() > 0) && Instant::now() < drain_until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cut_off = collector.working();
    bar.finish_and_clear();
    stop.cancel();
    let samples = sampler.await.unwrap_or_default();
    Ok(RunData {
        collector,
        started,
        sent,
        cut_off,
        wall_s: 0.0,
        samples,
    })
}

/// Sample the graph's queues every [`SAMPLE_EVERY`] from `started` until `stop`.
async fn sample(
    collector: Arc<Collector>,
    started: Instant,
    stop: CancellationToken,
) -> Vec<Sample> {
    let mut out = Vec::new();
    let mut tick = tokio::time::interval_at(started, SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            () = stop.cancelled() => return out,
            at = tick.tick() => out.push(Sample {
                at: at - started,
                queued: collector.queued(),
                in_flight: collector.in_flight(),
            }),
        }
    }
}

/// The client's connection to the edge service, in the edge's protocol.
#[derive(Clone, Debug)]
enum EdgeClient {
    /// `POST /call` over HTTP/2 (reqwest), the budget in `x-request-timeout-ms`.
    Http {
        client: reqwest::Client,
        url: String,
    },
    /// `hopbudget.demo.Hop/Call` (tonic), the budget in `grpc-timeout`.
    Grpc(HopClient<tonic::transport::Channel>),
}

impl EdgeClient {
    fn new(protocol: Protocol, addr: SocketAddr) -> Result<Self, String> {
        Ok(match protocol {
            Protocol::Http => EdgeClient::Http {
                client: peer::reqwest_client()?,
                url: format!("http://{addr}{}", HTTP_PATH),
            },
            Protocol::Grpc => EdgeClient::Grpc(HopClient::new(
                tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
                    .map_err(|e| format!("bad edge address {addr}: {e}"))?
                    .tcp_nodelay(true)
                    .connect_lazy(),
            )),
        })
    }

    /// One request; `forward` is the budget to send, if the mode sends one.
    async fn call(&self, id: u64, forward: Option<Duration>) -> Result<u32, HopError> {
        match self {
            EdgeClient::Http { client, url } => {
                let mut req = client.post(url).header(REQUEST_ID, id);
                if let Some(f) = forward {
                    req = req.header(
                        hopbudget::codec::REQUEST_TIMEOUT_MS,
                        hopbudget::codec::Carrier::RelativeMs
                            .encode(f, || 0)
                            .to_header_value(),
                    );
                }
                let resp = req
                    .send()
                    .await
                    .map_err(|e| HopError::Failed(format!("HTTP call failed: {e}")))?;
                let status = resp.status().as_u16();
                if status != 200 {
                    return Err(peer::from_http(status, resp.headers()));
                }
                let body = resp
                    .bytes()
                    .await
                    .map_err(|e| HopError::Failed(format!("bad reply: {e}")))?;
                Ok(serde_json::from_slice::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| v["degraded"].as_u64())
                    .unwrap_or(0) as u32)
            }
            EdgeClient::Grpc(client) => {
                let mut req = tonic::Request::new(HopRequest { request_id: id });
                req.metadata_mut()
                    .insert(REQUEST_ID, tonic::metadata::MetadataValue::from(id));
                if let Some(f) = forward {
                    let v = hopbudget::codec::Carrier::GrpcTimeout.encode(f, || 0);
                    if let Ok(v) = tonic::metadata::AsciiMetadataValue::try_from(v.as_bytes()) {
                        req.metadata_mut().insert(hopbudget::codec::GRPC_TIMEOUT, v);
                    }
                }
                match client.clone().call(req).await {
                    Ok(reply) => Ok(reply.into_inner().degraded),
                    Err(status) => Err(peer::from_grpc(&status)),
                }
            }
        }
    }
}

fn progress_bar(spec: &RunSpec, len: u64) -> ProgressBar {
    if !spec.progress || !std::io::stdout().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stdout());
    if let Ok(style) =
        ProgressStyle::with_template("{prefix:>22} [{bar:30}] {pos}/{len} requests {msg}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(spec.label.clone());
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_is_seeded_open_loop_and_bounded() {
        let a = schedule(827, 40.0, Duration::from_secs(20));
        let b = schedule(827, 40.0, Duration::from_secs(20));
        assert_eq!(
            a, b,
            "same seed, same arrivals: both modes see the same traffic"
        );
        assert_ne!(a, schedule(828, 40.0, Duration::from_secs(20)));
        // Poisson with mean 800: far outside 700..900 would mean a broken generator.
        assert!((700..900).contains(&a.len()), "{}", a.len());
        assert!(a.windows(2).all(|w| w[0] <= w[1]));
        assert!(a.last().unwrap() < &Duration::from_secs(20));
    }
}
