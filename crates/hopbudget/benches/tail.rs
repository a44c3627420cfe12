//! The tail experiment (issue #38, S21): the same seeded schedule of calls to a callee with a
//! heavy tail, with and without `HedgeLayer`, on tokio's paused clock.
//!
//! The callee: each attempt takes 5-10 ms, except 1% of attempts that take 50-100 ms (ten
//! times the median). An attempt's latency is drawn from the call's number and the attempt's
//! number, so both runs see exactly the same first attempts, and a hedge is an independent
//! draw (another replica). 20,000 calls arrive as a Poisson process at 1,000 a second, each
//! under a 500 ms budget; the callee has no queue, so this measures what hedging does to the
//! tail of independent latencies, not what its extra load does to a saturated callee. On the
//! paused clock every run gives the same figures on any machine.
//!
//! ```text
//! cargo bench -p hopbudget --bench tail
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopbudget::hedge::{HedgeLayer, HedgeStats};
use hopbudget::learned::{LearnConfig, LearnedThreshold};
use hopbudget::{HopPolicy, RequestBudget};
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

const CALLS: u64 = 20_000;
const SEED: u64 = 38;

/// splitmix64: a fixed, seedable stream without a dependency.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn uniform(seed: u64) -> f64 {
    (mix(seed) >> 11) as f64 / (1u64 << 53) as f64
}

/// The latency of attempt `attempt` of call `call`.
fn latency(call: u64, attempt: u32) -> Duration {
    let key = SEED ^ (call << 8) ^ u64::from(attempt);
    let slow = uniform(key.wrapping_mul(3)) < 0.01;
    let (lo, hi) = if slow { (50.0, 100.0) } else { (5.0, 10.0) };
    Duration::from_secs_f64((lo + (hi - lo) * uniform(key.wrapping_mul(5))) / 1000.0)
}

struct Run {
    latencies: Vec<Duration>,
    attempts: u64,
    answered: u64,
    stats: Option<HedgeStats>,
}

/// Which requests may be hedged: every call here.
type Every = fn(&u64) -> bool;

/// Attempts made so far, per call.
type Attempts = Arc<Mutex<HashMap<u64, u32>>>;

async fn run(hedge: Option<HedgeLayer<Every>>) -> Run {
    let attempts: Attempts = Arc::default();
    let seen = attempts.clone();
    let callee = tower::service_fn(move |call: u64| {
        let attempt = {
            let mut seen = seen.lock().unwrap();
            let n = seen.entry(call).or_insert(0);
            *n += 1;
            *n - 1
        };
        async move {
            tokio::time::sleep(latency(call, attempt)).await;
            Ok::<_, tower::BoxError>(())
        }
    });
    let svc = match &hedge {
        Some(layer) => tower::util::BoxCloneSyncService::new(layer.layer(callee)),
        None => tower::util::BoxCloneSyncService::new(callee),
    };
    let start = Instant::now();
    let mut at = Duration::ZERO;
    let mut tasks = Vec::with_capacity(CALLS as usize);
    for call in 0..CALLS {
        // Exponential gaps, mean 1 ms.
        at += Duration::from_secs_f64(-(1.0 - uniform(SEED ^ call ^ 0xa5a5)).ln() / 1000.0);
        tokio::time::sleep_until(start + at).await;
        let svc = svc.clone();
        tasks.push(tokio::spawn(async move {
            let budget = RequestBudget::local(Duration::from_millis(500), HopPolicy::DEFAULT);
            let began = Instant::now();
            let ok = budget.scope(svc.oneshot(call)).await.is_ok();
            (began.elapsed(), ok)
        }));
    }
    let mut latencies = Vec::with_capacity(tasks.len());
    let mut answered = 0;
    for t in tasks {
        let (l, ok) = t.await.unwrap();
        latencies.push(l);
        answered += u64::from(ok);
    }
    latencies.sort();
    let attempts = attempts
        .lock()
        .unwrap()
        .values()
        .map(|&n| u64::from(n))
        .sum();
    Run {
        latencies,
        attempts,
        answered,
        stats: hedge.map(|h| h.stats()),
    }
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn print(name: &str, r: &Run) {
    println!(
        "{name:<34} p50 {:>6.1} ms  p99 {:>6.1} ms  p99.9 {:>6.1} ms  goodput {:>6.2}%  attempts/call {:.4}{}",
        ms(quantile(&r.latencies, 0.5)),
        ms(quantile(&r.latencies, 0.99)),
        ms(quantile(&r.latencies, 0.999)),
        100.0 * r.answered as f64 / CALLS as f64,
        r.attempts as f64 / CALLS as f64,
        r.stats
            .map(|s| format!(
                "  (hedges {}, throttled {}, won {})",
                s.hedges, s.throttled, s.hedge_wins
            ))
            .unwrap_or_default(),
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let every: Every = |_| true;
        let plain = run(None).await;
        print("no hedging", &plain);
        for delay in [8, 10, 15] {
            let layer = HedgeLayer::new(Duration::from_millis(delay), 2, every);
            let hedged = run(Some(layer)).await;
            print(&format!("hedge after {delay} ms (2 attempts)"), &hedged);
            println!(
                "{:<34} p99.9 {:.1}x lower, {:.2}% extra requests",
                "",
                ms(quantile(&plain.latencies, 0.999)) / ms(quantile(&hedged.latencies, 0.999)),
                100.0 * (hedged.attempts as f64 / plain.attempts as f64 - 1.0),
            );
        }
        // The delay learned from the callee: its p95 over the last 8 s, from a 1 ms floor.
        let p95 = LearnConfig {
            quantile: 0.95,
            window: Duration::from_secs(8),
            min_samples: 100,
        };
        let learned = Arc::new(LearnedThreshold::new(Duration::from_millis(1), p95));
        let layer = HedgeLayer::new(Duration::from_millis(1), 2, every).learn(learned.clone());
        let hedged = run(Some(layer)).await;
        print("hedge after the learned p95", &hedged);
        println!(
            "{:<34} p99.9 {:.1}x lower, {:.2}% extra requests; learned delay at the end {:.1} ms",
            "",
            ms(quantile(&plain.latencies, 0.999)) / ms(quantile(&hedged.latencies, 0.999)),
            100.0 * (hedged.attempts as f64 / plain.attempts as f64 - 1.0),
            ms(learned.threshold()),
        );
    });
}
