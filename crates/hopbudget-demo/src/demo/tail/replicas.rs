//! Hedging across replicas (`demo --hedge --replicas`, S21's last sentence): the callee as
//! three replicas on loopback, replica 0 slow for the middle half of the run ([`NOISY_FACTOR`]
//! times its draws: a noisy neighbour), behind hopbudget's [`HedgeBalance`] (fewest in flight
//! first). The same schedule three times: without hedging; hedging after the unhedged run's
//! p95 outside the noisy stretch with the rule that a hedge goes to a replica its call's first attempt did not; and
//! the same without the rule. Attempt numbers, and so draws, are the call's whichever replica
//! an attempt reaches, and the replicas count the attempts that reached one an earlier attempt
//! of their call had reached.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use hdrhistogram::Histogram;
use hopbudget::hedge::{HedgeBalance, HedgeLayer, idempotent_method};
use hopbudget::http::client::ClientBudgetLayer;
use hopbudget::{Profile, RequestBudget};
use http_body_util::Full;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::{ServiceBuilder, ServiceExt};

use super::callee::{self, Counts, NOISY_FACTOR};
use super::options::{TailOptions, schedule};
use super::runtime::{http2_client, on_runtime};

/// Replicas of the callee.
pub const REPLICAS: usize = 3;

/// How a run routed its hedges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Routing {
    /// No hedging.
    None,
    /// Hedges to a replica the call's first attempt did not go to.
    Elsewhere,
    /// Hedges to whichever replica has the fewest in flight, the first attempt's included.
    Anywhere,
}

/// One run across the replicas.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplicaRun {
    /// How it routed hedges.
    pub routing: Routing,
    /// The hedge delay, ms.
    pub delay_ms: Option<f64>,
    /// Calls made.
    pub calls: u64,
    /// Calls answered within the budget.
    pub good: u64,
    /// Client latency of answered calls, ms: p50.
    pub p50_ms: f64,
    /// p95.
    pub p95_ms: f64,
    /// p95 of the calls that arrived while no replica was slow: the unhedged run's gives the
    /// hedge delay (hedging after the p95 of a run one replica spoilt would come too late).
    pub quiet_p95_ms: f64,
    /// p99.
    pub p99_ms: f64,
    /// p99.9.
    pub p999_ms: f64,
    /// Slowest.
    pub max_ms: f64,
    /// Attempts that reached a replica.
    pub attempts: u64,
    /// Hedges held back by the token bucket.
    pub throttled: u64,
    /// Calls answered by their hedge.
    pub hedge_wins: u64,
    /// Attempts that reached a replica an earlier attempt of their call had reached.
    pub same_replica: u64,
}

impl ReplicaRun {
    /// Attempts beyond one a call, as a share of calls.
    pub fn extra(&self) -> f64 {
        self.attempts.saturating_sub(self.calls) as f64 / self.calls.max(1) as f64
    }
}

/// The three runs: without hedging, hedging elsewhere, hedging anywhere.
pub fn run(opts: &TailOptions) -> Result<Vec<ReplicaRun>, String> {
    let plain = on_runtime(one(opts, Routing::None, Duration::ZERO))?;
    let delay = Duration::from_millis(plain.quiet_p95_ms.ceil() as u64);
    let mut out = vec![plain];
    for routing in [Routing::Elsewhere, Routing::Anywhere] {
        out.push(on_runtime(one(opts, routing, delay))?);
    }
    Ok(out)
}

async fn one(opts: &TailOptions, routing: Routing, delay: Duration) -> Result<ReplicaRun, String> {
    let stop = CancellationToken::new();
    let counts = Arc::new(Counts::default());
    let stretch = (opts.duration / 4, opts.duration * 3 / 4);
    let client = http2_client();
    let mut replicas = Vec::with_capacity(REPLICAS);
    for i in 0..REPLICAS {
        let noisy = (i == 0).then_some(stretch);
        let addr = callee::start_replica(opts.tail, noisy, i, counts.clone(), stop.clone()).await?;
        let uri: http::Uri = format!("http://{addr}/tail")
            .parse()
            .map_err(|e| format!("cannot make the replica's address a URI: {e}"))?;
        replicas.push(
            ServiceBuilder::new()
                .map_request(move |mut req: http::Request<Full<Bytes>>| {
                    *req.uri_mut() = uri.clone();
                    req
                })
                .service(client.clone()),
        );
    }
    let mut balance = HedgeBalance::new(replicas);
    if routing == Routing::Anywhere {
        balance = balance.ignore_hedges();
    }
    let hedge = (routing != Routing::None)
        .then(|| HedgeLayer::new(delay, 2, idempotent_method::<Full<Bytes>>));
    let profile = Profile::default();
    let client = ServiceBuilder::new()
        .option_layer(hedge.clone())
        .layer(ClientBudgetLayer::new(profile.clone()))
        .service(balance);
    let request = |call: u64| {
        http::Request::get("http://replica/tail")
            .header(callee::CALL, call)
            .body(Full::new(Bytes::new()))
            .map_err(|e| format!("cannot build a request: {e}"))
    };
    // Open each replica's connection (the balancer takes them in turn), uncounted.
    for _ in 0..REPLICAS {
        let warm = RequestBudget::local(opts.budget, profile.policy());
        let _ = warm
            .scope(client.clone().oneshot(request(callee::WARM_UP)?))
            .await;
    }
    let base = hedge.as_ref().map(HedgeLayer::stats).unwrap_or_default();

    let arrivals = schedule(opts);
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(arrivals.len());
    for (call, at) in arrivals.iter().enumerate() {
        tokio::time::sleep_until(started + *at).await;
        let (client, req) = (client.clone(), request(call as u64)?);
        let budget = RequestBudget::local(opts.budget, profile.policy());
        tasks.push(tokio::spawn(async move {
            let began = Instant::now();
            let answer = budget.scope(client.oneshot(req)).await;
            (answer.is_ok_and(|r| r.status() == 200), began.elapsed())
        }));
    }
    let histogram = || {
        Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)
            .map_err(|e| format!("cannot make the latency histogram: {e}"))
    };
    let (mut latency, mut quiet) = (histogram()?, histogram()?);
    let mut good = 0;
    for (t, at) in tasks.into_iter().zip(&arrivals) {
        let (ok, took) = t.await.map_err(|e| format!("a call panicked: {e}"))?;
        if ok {
            let us = took.as_micros().max(1) as u64;
            latency.saturating_record(us);
            if *at < stretch.0 || *at >= stretch.1 {
                quiet.saturating_record(us);
            }
            good += u64::from(took <= opts.budget);
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.cancel();
    let stats = hedge.as_ref().map(HedgeLayer::stats).unwrap_or_default();
    let ms = |q: f64| latency.value_at_quantile(q) as f64 / 1000.0;
    Ok(ReplicaRun {
        routing,
        delay_ms: (routing != Routing::None).then_some(delay.as_secs_f64() * 1000.0),
        calls: arrivals.len() as u64,
        good,
        p50_ms: ms(0.5),
        p95_ms: ms(0.95),
        quiet_p95_ms: quiet.value_at_quantile(0.95) as f64 / 1000.0,
        p99_ms: ms(0.99),
        p999_ms: ms(0.999),
        max_ms: latency.max() as f64 / 1000.0,
        attempts: counts.arrived.load(Ordering::Relaxed),
        throttled: stats.throttled - base.throttled,
        hedge_wins: stats.hedge_wins - base.hedge_wins,
        same_replica: counts.same_replica.load(Ordering::Relaxed),
    })
}

/// The runs as a text table with its caption.
pub fn text(runs: &[ReplicaRun], opts: &TailOptions) -> String {
    let mut out = String::from(
        "hedging                          calls  goodput  p50 ms  p95 ms  p99 ms  p99.9 ms  max ms  extra requests  throttled  hedge wins  hedges to the same replica\n",
    );
    for r in runs {
        let how = match (r.routing, r.delay_ms) {
            (Routing::None, _) => "none".to_owned(),
            (Routing::Elsewhere, d) => format!("after {:.0} ms, elsewhere", d.unwrap_or(0.0)),
            (Routing::Anywhere, d) => format!("after {:.0} ms, anywhere", d.unwrap_or(0.0)),
        };
        let _ = writeln!(
            out,
            "{how:<31}  {:>5}  {:>6.2}%  {:>6.1}  {:>6.1}  {:>6.1}  {:>8.1}  {:>6.1}  {:>13.2}%  {:>9}  {:>10}  {:>26}",
            r.calls,
            100.0 * r.good as f64 / r.calls.max(1) as f64,
            r.p50_ms,
            r.p95_ms,
            r.p99_ms,
            r.p999_ms,
            r.max_ms,
            100.0 * r.extra(),
            r.throttled,
            r.hedge_wins,
            r.same_replica,
        );
    }
    let _ = writeln!(
        out,
        "Hedging across replicas: {} calls/s for {:.0} s (seeded Poisson), each under a {} ms \
         budget, to {REPLICAS} replicas of a callee whose {}; replica 0 is {NOISY_FACTOR} times \
         slower from {:.0} s to {:.0} s (a noisy neighbour). Client: HedgeLayer (2 attempts, \
         default token bucket, after the p95 of the unhedged run's calls outside that stretch) above ClientBudgetLayer above \
         HedgeBalance (fewest in flight first) over one HTTP/2 connection a replica. Elsewhere: \
         a hedge goes to a replica its call's first attempt did not go to; anywhere: to the \
         replica with the fewest in flight, the first attempt's included.",
        opts.rate_per_s,
        opts.duration.as_secs_f64(),
        opts.budget.as_millis(),
        opts.tail.describe(),
        opts.duration.as_secs_f64() / 4.0,
        opts.duration.as_secs_f64() * 3.0 / 4.0,
    );
    out
}
