//! The tail over real sockets (`demo --hedge`, scenario S21): the same seeded schedule of
//! calls to a heavy-tailed callee ([`callee`], one of two [`Tail`]s) on loopback, once without
//! hedging and then with hopbudget's `HedgeLayer`, and what each gave: p50, p99, p99.9,
//! goodput, and the extra attempts hedging sent; beside each hedged run, the best p99.9 any
//! single hedge delay gives at the rate of extra calls that run used ([`best`]), computed from
//! attempt pairs the same invocation recorded over the same sockets (the pairs run). The library's `tail` bench is the same experiment on tokio's paused
//! clock with no network; this one has hyper's HTTP/2 client, axum and the server layer in
//! the way, and a losing attempt really is reset on the wire.
//!
//! The client is the stack the guide recommends: `HedgeLayer` (at most 2 attempts, the
//! default token bucket) above `ClientBudgetLayer` above hyper-util's HTTP/2 client, each call
//! under a 500 ms budget. Five runs: no hedging; hedging after the p95 and after the p98 the
//! unhedged run measured at the client (the sockets add to the callee's own 10 ms p95, and
//! spread its ordinary calls past it); hedging after the p95 the layer learns as it goes
//! (`LearnedThreshold`, 8 s window, 1 ms floor); and after the measured p95 again with a
//! bucket of 100 tokens instead of 10, which a burst of due hedges does not empty. Between
//! the unhedged run and the hedged ones, the pairs run sends every call's first two attempts
//! at once.
//!
//! What every run shares sits below them: its options and seeded arrivals (`options.rs`),
//! its HTTP/2 client and its runtime (`runtime.rs`).

pub mod best;
pub mod callee;
mod options;
mod pairs;
pub mod replicas;
mod runtime;

pub use callee::Tail;
pub use options::TailOptions;
use options::schedule;
use runtime::{http2_client, on_runtime};

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use hdrhistogram::Histogram;
use hopbudget::hedge::{HedgeLayer, HedgeThrottle, idempotent_method};
use hopbudget::http::client::ClientBudgetLayer;
use hopbudget::learned::{LearnConfig, LearnedThreshold};
use hopbudget::{Profile, RequestBudget};
use http_body_util::Full;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::{ServiceBuilder, ServiceExt};

use best::Best;

/// When a run hedges.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Hedging {
    /// Never.
    None,
    /// After a fixed delay.
    Fixed(Duration),
    /// After the callee's p95 as the layer learns it.
    Learned,
    /// After a fixed delay, with a token bucket of [`DEEP_BUCKET`] tokens rather than 10, so
    /// that a burst of due hedges does not empty it.
    DeepBucket(Duration),
}

/// Tokens of the deeper bucket (earning the default 0.05 a call).
pub const DEEP_BUCKET: u32 = 100;

/// One run: with or without hedging.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TailRun {
    /// How it hedged.
    pub hedging: Hedging,
    /// The delay at the end of the run, ms (`None`: no hedging).
    pub delay_ms: Option<f64>,
    /// Calls made.
    pub calls: u64,
    /// Calls answered within the budget.
    pub good: u64,
    /// Client latency percentiles of answered calls, ms: p50, p99, p99.9, max.
    pub p50_ms: f64,
    /// p95.
    pub p95_ms: f64,
    /// p98.
    pub p98_ms: f64,
    /// p99.
    pub p99_ms: f64,
    /// p99.9.
    pub p999_ms: f64,
    /// Slowest.
    pub max_ms: f64,
    /// Attempts that reached the callee.
    pub attempts: u64,
    /// Hedges sent, as the layer counted them.
    pub hedges: u64,
    /// Hedges due but held back by the token bucket.
    pub throttled: u64,
    /// Calls answered by their hedge.
    pub hedge_wins: u64,
    /// Attempts the callee saw end cancelled (the losers), and expired.
    pub cancelled: u64,
    /// Attempts the callee saw end at their deadline.
    pub expired: u64,
    /// The best single hedge delay at this run's rate of extra calls (at most
    /// [`MAX_EXTRA`]), from the pairs run; `None` without hedging.
    pub best: Option<Best>,
}

impl TailRun {
    /// Attempts beyond one a call, as a share of calls.
    pub fn extra(&self) -> f64 {
        self.attempts.saturating_sub(self.calls) as f64 / self.calls.max(1) as f64
    }

    /// This run's p99.9 over the best one at its rate of extra calls (1.15: 15% above it).
    pub fn vs_best(&self) -> Option<f64> {
        self.best.map(|b| self.p999_ms / b.p999_ms.max(0.001))
    }
}

/// The most extra calls hedging may add, as a share of calls (scenario S21).
pub const MAX_EXTRA: f64 = 0.05;

/// The runs of one `demo --hedge` and the pairs the best hedge was computed from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TailReport {
    /// The callee's latencies.
    pub tail: Tail,
    /// Without hedging first, then with it.
    pub runs: Vec<TailRun>,
    /// Calls of the pairs run (two attempts each, sent at once).
    pub pairs: usize,
    /// The p99.9 of the pairs run's first attempts, ms: the unhedged tail under the pairs
    /// run's doubled load.
    pub pairs_first_p999_ms: f64,
    /// The best single hedge delay with the most extra calls allowed ([`MAX_EXTRA`]): what
    /// hedging could do on this callee at all (`None`: no pairs).
    pub best_at_most: Option<Best>,
}

/// The unhedged run, the pairs run, and the four hedged runs, each hedged one with the best
/// hedge at its rate of extra calls.
pub fn run(opts: &TailOptions) -> Result<TailReport, String> {
    let mut out: Vec<TailRun> = vec![on_runtime(one(opts, Hedging::None))?];
    let recorded = on_runtime(pairs::record(opts, opts.tail))?;
    for i in 1..5 {
        // The client-side p95 and p98 without hedging, to the next whole millisecond.
        let at = |q: fn(&TailRun) -> f64| {
            Hedging::Fixed(Duration::from_millis(
                out.first().map_or(10.0, q).ceil() as u64
            ))
        };
        let hedging = match i {
            1 => at(|r| r.p95_ms),
            2 => at(|r| r.p98_ms),
            3 => Hedging::Learned,
            _ => match at(|r| r.p95_ms) {
                Hedging::Fixed(d) => Hedging::DeepBucket(d),
                other => other,
            },
        };
        let mut hedged = on_runtime(one(opts, hedging))?;
        hedged.best = best::best_delay(&recorded, hedged.extra().min(MAX_EXTRA));
        out.push(hedged);
    }
    let mut firsts: Vec<f64> = recorded.iter().map(|p| p.first_ms).collect();
    Ok(TailReport {
        tail: opts.tail,
        runs: out,
        pairs: recorded.len(),
        pairs_first_p999_ms: best::quantile(&mut firsts, 0.999).unwrap_or(0.0),
        best_at_most: best::best_delay(&recorded, MAX_EXTRA),
    })
}

async fn one(opts: &TailOptions, hedging: Hedging) -> Result<TailRun, String> {
    let stop = CancellationToken::new();
    let (addr, counts) = callee::start(opts.tail, stop.clone()).await?;
    let profile = Profile::default();
    let p95 = LearnConfig {
        quantile: 0.95,
        window: Duration::from_secs(8),
        min_samples: 100,
    };
    let learned = Arc::new(LearnedThreshold::new(Duration::from_millis(1), p95));
    let hedge = match hedging {
        Hedging::None => None,
        Hedging::Fixed(d) => Some(HedgeLayer::new(d, 2, idempotent_method::<Full<Bytes>>)),
        Hedging::Learned => Some(
            HedgeLayer::new(
                Duration::from_millis(1),
                2,
                idempotent_method::<Full<Bytes>>,
            )
            .learn(learned.clone()),
        ),
        Hedging::DeepBucket(d) => Some(
            HedgeLayer::new(d, 2, idempotent_method::<Full<Bytes>>)
                .throttle(Some(Arc::new(HedgeThrottle::new(DEEP_BUCKET, 0.05)))),
        ),
    };
    let client = ServiceBuilder::new()
        .option_layer(hedge.clone())
        .layer(ClientBudgetLayer::new(profile.clone()))
        .service(http2_client());
    let url = format!("http://{addr}/tail");
    let request = |call: u64| {
        http::Request::get(&url)
            .header(callee::CALL, call)
            .body(Full::new(Bytes::new()))
            .map_err(|e| format!("cannot build a request: {e}"))
    };
    // One call to open the HTTP/2 connection, which the callee does not count.
    let warm = RequestBudget::local(opts.budget, profile.policy());
    let _ = warm
        .scope(client.clone().oneshot(request(callee::WARM_UP)?))
        .await;
    let stats_base = hedge.as_ref().map(HedgeLayer::stats);

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
            let ok = answer.is_ok_and(|r| r.status() == 200);
            (ok, began.elapsed())
        }));
    }
    let mut latency = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)
        .map_err(|e| format!("cannot make the latency histogram: {e}"))?;
    let mut good = 0;
    for t in tasks {
        let (ok, took) = t.await.map_err(|e| format!("a call panicked: {e}"))?;
        if ok {
            latency.saturating_record(took.as_micros().max(1) as u64);
            good += u64::from(took <= opts.budget);
        }
    }
    // Let the losers' resets reach the callee before counting.
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.cancel();
    let stats = match (hedge.as_ref().map(HedgeLayer::stats), stats_base) {
        (Some(s), Some(b)) => (
            s.hedges - b.hedges,
            s.throttled - b.throttled,
            s.hedge_wins - b.hedge_wins,
        ),
        _ => (0, 0, 0),
    };
    let ms = |q: f64| latency.value_at_quantile(q) as f64 / 1000.0;
    Ok(TailRun {
        hedging,
        delay_ms: match hedging {
            Hedging::None => None,
            Hedging::Fixed(d) | Hedging::DeepBucket(d) => Some(d.as_secs_f64() * 1000.0),
            Hedging::Learned => Some(learned.threshold().as_secs_f64() * 1000.0),
        },
        calls: arrivals.len() as u64,
        good,
        p50_ms: ms(0.5),
        p95_ms: ms(0.95),
        p98_ms: ms(0.98),
        p99_ms: ms(0.99),
        p999_ms: ms(0.999),
        max_ms: latency.max() as f64 / 1000.0,
        attempts: counts.arrived.load(Ordering::Relaxed),
        hedges: stats.0,
        throttled: stats.1,
        hedge_wins: stats.2,
        cancelled: counts.cancelled.load(Ordering::Relaxed),
        expired: counts.expired.load(Ordering::Relaxed),
        best: None,
    })
}

/// The runs as a text table with its caption.
pub fn text(report: &TailReport, opts: &TailOptions) -> String {
    let runs = &report.runs;
    let mut out = format!(
        "tail: {} ({})\n",
        report.tail.as_str(),
        report.tail.describe()
    );
    out.push_str(
        "hedging                      calls  goodput  p50 ms  p95 ms  p99 ms  p99.9 ms  max ms  p99.9 lower by  extra requests  throttled  hedge wins  losers cancelled  best p99.9 ms (delay)  vs best\n",
    );
    let unhedged = runs.first().map_or(0.0, |r| r.p999_ms);
    for r in runs {
        let how = match (r.hedging, r.delay_ms) {
            (Hedging::None, _) => "none".to_owned(),
            (Hedging::Fixed(_), Some(d)) => format!("after {d:.0} ms"),
            (Hedging::DeepBucket(_), Some(d)) => format!("after {d:.0} ms, {DEEP_BUCKET} tokens"),
            (_, d) => format!("learned p95 ({:.1} ms)", d.unwrap_or(0.0)),
        };
        let best = match r.best {
            Some(Best {
                delay_ms: Some(d),
                p999_ms,
                ..
            }) => format!("{p999_ms:.1} ({d:.1})"),
            Some(Best { p999_ms, .. }) => format!("{p999_ms:.1} (none)"),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "{how:<27}  {:>5}  {:>6.2}%  {:>6.1}  {:>6.1}  {:>6.1}  {:>8.1}  {:>6.1}  {:>14}  {:>13.2}%  {:>9}  {:>10}  {:>16}  {best:>21}  {:>7}",
            r.calls,
            100.0 * r.good as f64 / r.calls.max(1) as f64,
            r.p50_ms,
            r.p95_ms,
            r.p99_ms,
            r.p999_ms,
            r.max_ms,
            if r.hedging == Hedging::None {
                String::new()
            } else {
                format!("{:.1}x", unhedged / r.p999_ms.max(0.001))
            },
            100.0 * r.extra(),
            r.throttled,
            r.hedge_wins,
            r.cancelled,
            r.vs_best().map_or(String::new(), |v| format!("{v:.2}x")),
        );
    }
    let _ = writeln!(
        out,
        "The tail over real sockets: {} calls/s for {:.0} s (seeded Poisson), each under a {} ms \
         budget, to a callee on loopback whose {}; the same schedule and first attempts in \
         every run. Hedging: HedgeLayer (2 attempts, default token bucket) above \
         ClientBudgetLayer on hyper's HTTP/2 client, after the p95 and the p98 the unhedged run \
         measured, after the p95 it learns (its value at the end), or after the measured p95 \
         with a bucket of 100 tokens. Extra requests: attempts the callee received beyond one a \
         call. Best: the lowest p99.9 a single hedge delay gives at that run's rate of extra \
         requests (at most 5%), computed from {} attempt pairs recorded between the unhedged \
         and the hedged runs (each call's first two attempts sent at once over the same \
         sockets; their first attempts' p99.9 was {:.1} ms); vs best: the run's p99.9 over it \
         (S21's goal: at most 1.15x).{}",
        opts.rate_per_s,
        opts.duration.as_secs_f64(),
        opts.budget.as_millis(),
        report.tail.describe(),
        report.pairs,
        report.pairs_first_p999_ms,
        match report.tail {
            Tail::TenX => "",
            Tail::Seeds => " On this tail S21 also asks for a p99.9 at least five times lower.",
        }
    );
    if let Some(Best {
        delay_ms: Some(d),
        p999_ms,
        extra,
    }) = report.best_at_most
    {
        let _ = writeln!(
            out,
            "With all of the 5% allowed, the best single delay ({d:.1} ms, {:.2}% more requests) \
             gives a p99.9 of {p999_ms:.1} ms on the same pairs.",
            100.0 * extra
        );
    }
    out
}
