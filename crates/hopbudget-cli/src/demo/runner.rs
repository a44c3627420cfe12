//! One run of one mode: start every service on its own loopback port, replay the seeded
//! open-loop arrival schedule against the edge, wait for the work to drain, stop everything.
//!
//! Each run gets its own tokio runtime, which is shut down at the end: work still running
//! after the drain limit (only possible in `timeouts` mode) is stopped there and counted up
//! to that moment, so the figure for wasted work is a lower bound.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rand::{Rng, SeedableRng, rngs::StdRng};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::collector::Collector;
use super::queue;
use super::services::{self, Node, REQUEST_ID};
use super::topology::Topology;
use super::wiring::{self, Mode};

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
}

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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the tokio runtime: {e}"))?;
    let wall = std::time::Instant::now();
    let result = rt.block_on(run_async(topo, spec));
    // Dropping the runtime stops detached work that outlived the drain limit; its work
    // guards record the moment it stopped.
    rt.shutdown_timeout(Duration::from_millis(500));
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
    let listeners = services::bind_all(topo, |_| SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .map_err(|e| e.to_string())?;
    let addrs: Vec<SocketAddr> = listeners.iter().map(|(_, a)| *a).collect();
    let http = wiring::reqwest_client()?;
    for (idx, (listener, _)) in listeners.into_iter().enumerate() {
        let s = &topo.services[idx];
        let profile = services::profile_for(s).map_err(|e| format!("{}: {e}", s.name))?;
        let node = Arc::new(Node {
            idx,
            spec: s.clone(),
            mode: spec.mode,
            forgetful: spec.forgetful.as_deref() == Some(s.name.as_str()),
            sem: Semaphore::new(s.concurrency as usize),
            peers: wiring::peers_for(topo, s, spec.mode, &profile, &addrs, &http)?,
            collector: collector.clone(),
            profile,
            seed: topo.client.seed,
            queue: s
                .background
                .as_ref()
                .map(|bg| queue::start(bg, spec.mode, collector.clone())),
        });
        wiring::spawn_server(node, listener, stop.clone());
    }
    let edge = topo
        .index_of(&topo.edge().name)
        .ok_or("the topology has no edge service")?;
    let url = format!("http://{}{}", addrs[edge], services::HTTP_PATH);
    let arrivals = schedule(topo.client.seed, spec.rate_per_s, spec.duration);
    let sent = arrivals.len();
    let bar = progress_bar(spec, sent as u64);
    let budget = Duration::from_millis(topo.client.budget_ms);
    let give_up = Duration::from_millis(topo.client.timeout_ms);
    let client = wiring::reqwest_client()?;
    warm_up(&client, &url).await;
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(sent);
    for (i, at) in arrivals.into_iter().enumerate() {
        tokio::time::sleep_until(started + at).await;
        let id = i as u64 + 1;
        let (client, url, collector, bar) =
            (client.clone(), url.clone(), collector.clone(), bar.clone());
        let mode = spec.mode;
        tasks.push(tokio::spawn(async move {
            collector.client_start(id, Instant::now());
            let req =
                wiring::client_request(mode, client.post(&url), budget).header(REQUEST_ID, id);
            match tokio::time::timeout(give_up, req.send()).await {
                Err(_) => {
                    // The client's own timeout fired on its call to the edge.
                    collector.expired(edge);
                    collector.client_end(id, false, true, false);
                }
                Ok(Err(_)) => collector.client_end(id, false, false, false),
                Ok(Ok(resp)) => {
                    match resp.status().as_u16() {
                        503 => collector.refused(edge),
                        504 => collector.expired(edge),
                        _ => {}
                    }
                    let ok = resp.status().is_success();
                    let degraded = if ok {
                        match tokio::time::timeout(give_up, resp.bytes()).await {
                            Ok(Ok(b)) => serde_json::from_slice::<serde_json::Value>(&b)
                                .ok()
                                .and_then(|v| v["degraded"].as_u64())
                                .is_some_and(|d| d > 0),
                            _ => false,
                        }
                    } else {
                        false
                    };
                    collector.client_end(id, ok, false, degraded);
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
    Ok(RunData {
        collector,
        started,
        sent,
        cut_off,
        wall_s: 0.0,
    })
}

/// One request before the clock starts, so connection set-up is not part of the figures.
async fn warm_up(client: &reqwest::Client, url: &str) {
    let _ = tokio::time::timeout(
        Duration::from_secs(2),
        client.post(url).header(REQUEST_ID, 0u64).send(),
    )
    .await;
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
