//! The heavy-tailed callee of the tail experiment: an axum service on loopback behind
//! hopbudget's server layer, with one of two tails ([`Tail`]): attempts of 5-10 ms except 1%
//! of 50-100 ms (ten times the median), as in the library's `tail` bench; or the seeds'
//! reco-scorer model sidecar, 5 ms except 1% of 180 ms (a stale cached model). An attempt's
//! latency is drawn from its call's number and its attempt number (the n-th arrival of that
//! call, or the number its request states), so a run with hedging and one without see exactly
//! the same first attempts, and a hedge is an independent draw (as if a balancer had sent it
//! to another replica).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use hopbudget::http::server::ServerBudgetLayer;
use hopbudget::{EndCause, Profile, RequestBudget};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

/// The seed of every latency draw.
pub const SEED: u64 = 38;

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

/// The callee's latencies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tail {
    /// 5-10 ms, except 1% of attempts that take 50-100 ms: the slowest 1% take ten times the
    /// median (the library's `tail` bench).
    #[default]
    TenX,
    /// The seeds' reco-scorer model sidecar: 5 ms, except 1% of attempts that hit a stale
    /// cached model and take 180 ms.
    Seeds,
}

impl Tail {
    /// How the tail is named on the command line and in the reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Tail::TenX => "ten-x",
            Tail::Seeds => "seeds",
        }
    }

    /// What the callee's attempts take, in words.
    pub fn describe(self) -> &'static str {
        match self {
            Tail::TenX => "attempts take 5-10 ms except 1% that take 50-100 ms",
            Tail::Seeds => {
                "attempts take 5 ms except 1% that hit a stale cached model and take 180 ms \
                 (the seeds' reco-scorer model sidecar)"
            }
        }
    }

    /// The latency of attempt `attempt` (0: the first) of call `call`. Both tails draw the
    /// same calls and attempts as slow.
    pub fn latency(self, call: u64, attempt: u32) -> Duration {
        let key = SEED ^ (call << 8) ^ u64::from(attempt);
        let slow = uniform(key.wrapping_mul(3)) < 0.01;
        let ms = match (self, slow) {
            (Tail::TenX, true) => 50.0 + 50.0 * uniform(key.wrapping_mul(5)),
            (Tail::TenX, false) => 5.0 + 5.0 * uniform(key.wrapping_mul(5)),
            (Tail::Seeds, true) => 180.0,
            (Tail::Seeds, false) => 5.0,
        };
        Duration::from_secs_f64(ms / 1000.0)
    }
}

/// The latency of attempt `attempt` (0: the first) of call `call` on the default tail.
pub fn latency(call: u64, attempt: u32) -> Duration {
    Tail::TenX.latency(call, attempt)
}

/// What the callee counted.
#[derive(Debug, Default)]
pub struct Counts {
    /// Attempts that arrived.
    pub arrived: AtomicU64,
    /// Attempts answered.
    pub answered: AtomicU64,
    /// Attempts whose caller went away first (a hedge's loser): cancelled, not failed (C5).
    pub cancelled: AtomicU64,
    /// Attempts ended by their deadline.
    pub expired: AtomicU64,
    /// Attempts that arrived at a replica an earlier attempt of their call had gone to.
    pub same_replica: AtomicU64,
    /// Per call: its attempts so far, and the replicas they went to (one bit each).
    attempts: Mutex<HashMap<u64, (u32, u64)>>,
}

/// The header that numbers a call (every attempt of a call carries the same).
pub const CALL: &str = "x-call";

/// The header that numbers an attempt of its call (0: the first), when the caller sends
/// several at once and their order of arrival would not say which is which.
pub const ATTEMPT: &str = "x-attempt";

/// The number of the call that opens the connection before a run: served, never counted
/// (with a learned delay it may be hedged, and its loser arrive once the run has begun).
pub const WARM_UP: u64 = u64::MAX - 1;

/// Counts how an attempt ended, even when its handler is dropped.
struct Ending {
    counts: Option<Arc<Counts>>,
    budget: RequestBudget,
    answered: bool,
}

impl Drop for Ending {
    fn drop(&mut self) {
        let Some(c) = &self.counts else { return };
        if self.answered {
            c.answered.fetch_add(1, Ordering::Relaxed);
            return;
        }
        match self.budget.end_cause() {
            Some(EndCause::Expired) => c.expired.fetch_add(1, Ordering::Relaxed),
            _ => c.cancelled.fetch_add(1, Ordering::Relaxed),
        };
    }
}

/// A number in a header, if it holds one.
fn number(headers: &http::HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.parse().ok()
}

async fn attempt(
    State(replica): State<Replica>,
    headers: http::HeaderMap,
    budget: RequestBudget,
) -> &'static str {
    let Replica {
        tail,
        noisy,
        index,
        counts,
    } = replica;
    let call = number(&headers, CALL).unwrap_or(u64::MAX);
    let counted = call != WARM_UP;
    if counted {
        counts.arrived.fetch_add(1, Ordering::Relaxed);
    }
    let n = {
        let mut seen = counts
            .attempts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (n, replicas) = seen.entry(call).or_default();
        let bit = 1u64 << (index % 64);
        if *replicas & bit != 0 && counted {
            counts.same_replica.fetch_add(1, Ordering::Relaxed);
        }
        *replicas |= bit;
        *n += 1;
        *n - 1
    };
    let n = number(&headers, ATTEMPT).map_or(n, |a| u32::try_from(a).unwrap_or(u32::MAX));
    let mut ending = Ending {
        counts: counted.then(|| counts.clone()),
        budget,
        answered: false,
    };
    let mut took = tail.latency(call, n);
    if noisy.is_some_and(|w| w.now()) {
        took *= NOISY_FACTOR;
    }
    tokio::time::sleep(took).await;
    ending.answered = true;
    "answered"
}

/// How much slower a replica's attempts are while a noisy neighbour shares its machine.
pub const NOISY_FACTOR: u32 = 10;

/// A stretch of time, from the callee's start, in which its attempts take [`NOISY_FACTOR`]
/// times as long (a noisy neighbour).
#[derive(Clone, Copy, Debug)]
pub struct Noisy {
    from: tokio::time::Instant,
    to: tokio::time::Instant,
}

impl Noisy {
    fn now(self) -> bool {
        (self.from..self.to).contains(&tokio::time::Instant::now())
    }
}

/// What one replica of the callee serves with.
#[derive(Clone)]
struct Replica {
    tail: Tail,
    noisy: Option<Noisy>,
    index: usize,
    counts: Arc<Counts>,
}

/// Start the callee with `tail` on a free loopback port; it stops with `stop`.
pub async fn start(
    tail: Tail,
    stop: CancellationToken,
) -> Result<(SocketAddr, Arc<Counts>), String> {
    let counts = Arc::new(Counts::default());
    let addr = start_replica(tail, None, 0, counts.clone(), stop).await?;
    Ok((addr, counts))
}

/// Start replica `index` of the callee, counting into `counts` (shared by the replicas, so
/// that an attempt's number, and so its draw, is the call's, whichever replica it reaches); it
/// is slow from `stretch.0` to `stretch.1` after now (see [`Noisy`]).
pub async fn start_replica(
    tail: Tail,
    stretch: Option<(Duration, Duration)>,
    index: usize,
    counts: Arc<Counts>,
    stop: CancellationToken,
) -> Result<SocketAddr, String> {
    let now = tokio::time::Instant::now();
    let noisy = stretch.map(|(from, to)| Noisy {
        from: now + from,
        to: now + to,
    });
    let app = Router::new()
        .route("/tail", get(attempt))
        .with_state(Replica {
            tail,
            noisy,
            index,
            counts,
        })
        .layer(ServerBudgetLayer::new(Profile::default()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("cannot bind the callee: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("cannot read the callee's address: {e}"))?;
    // Without TCP_NODELAY a losing attempt's small reset frame can wait for the delayed ACK
    // of the data before it (Nagle's algorithm): 40 ms for every stream on the connection.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await;
    });
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeds_tail_is_5_ms_with_1_percent_of_attempts_at_180_ms() {
        let ms = Duration::from_millis;
        let draws: Vec<Duration> = (0..20_000)
            .flat_map(|c| [Tail::Seeds.latency(c, 0), Tail::Seeds.latency(c, 1)])
            .collect();
        assert!(draws.iter().all(|&d| d == ms(5) || d == ms(180)));
        let slow = draws.iter().filter(|&&d| d == ms(180)).count();
        assert!((300..=500).contains(&slow), "{slow} of 40,000 slow");
        // The same calls and attempts are slow on both tails.
        for c in 0..2_000 {
            assert_eq!(
                Tail::Seeds.latency(c, 0) == ms(180),
                Tail::TenX.latency(c, 0) >= ms(50)
            );
        }
    }
}
