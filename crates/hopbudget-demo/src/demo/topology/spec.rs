//! The sections of a topology file, as written: the client, each service, its latency,
//! faults, cheaper path, background work and calls.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The client side of the demo: budget, timeout and the open-loop arrival schedule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientSpec {
    /// The user's whole budget, in ms.
    pub budget_ms: u64,
    /// When the client gives up, in ms.
    pub timeout_ms: u64,
    /// Arrivals per second (open loop, Poisson).
    pub rate_per_s: f64,
    /// Seconds of arrivals per mode.
    pub duration_s: f64,
    /// Seed of the arrival schedule and of every sampled latency.
    pub seed: u64,
}

/// A latency as its p50 and p99.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencySpec {
    /// Median, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
}

impl LatencySpec {
    /// The log-normal's `mu` and `sigma` fitted to p50 and p99.
    pub fn lognormal(&self) -> (f64, f64) {
        // p99 of a standard normal.
        const Z99: f64 = 2.326_347_874;
        let mu = self.p50_ms.ln();
        let sigma = ((self.p99_ms.ln() - mu) / Z99).max(0.0);
        (mu, sigma)
    }

    /// Mean of the fitted log-normal, ms.
    pub fn mean_ms(&self) -> f64 {
        let (mu, sigma) = self.lognormal();
        (mu + sigma * sigma / 2.0).exp()
    }
}

/// A fault: a different latency on a share of requests.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    /// A name for reports (`stale-model`).
    pub name: String,
    /// Share of requests that take the fault's latency, 0 to 1.
    pub rate: f64,
    /// The latency on the fault's path.
    pub latency: LatencySpec,
}

/// A cheaper path a service takes when the budget left cannot pay for its full work
/// (`hopbudget::degrade::Degrade`). Only a hop that knows its budget can choose it, so only
/// `propagated` mode degrades; without a budget the full path always runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DegradeSpec {
    /// The cheaper path's name (`precomputed`): the `path` label of `hopbudget_degraded_total`.
    pub path: String,
    /// What the full path is taken to cost, ms: with less budget left than this when its work
    /// would start, the hop takes the cheaper path.
    pub full_cost_ms: u64,
    /// The cheaper path's own work.
    pub latency: LatencySpec,
}

impl DegradeSpec {
    /// What the full path is taken to cost.
    pub fn full_cost(&self) -> Duration {
        Duration::from_millis(self.full_cost_ms)
    }
}

/// Background work a service hands over a queue after answering (S11): it runs under its own
/// deadline, rooted when it is scheduled, and is not cancelled when the response goes out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackgroundSpec {
    /// A name for reports (`order-confirmation-email`).
    pub name: String,
    /// The work's latency.
    pub latency: LatencySpec,
    /// Its own deadline, from the moment it is scheduled.
    pub deadline_ms: u64,
    /// Workers consuming the queue.
    #[serde(default = "one")]
    pub workers: u32,
}

fn one() -> u32 {
    1
}

/// How callers reach a service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// `POST /call` over HTTP.
    Http,
    /// `hopbudget.demo.Hop/Call` over gRPC.
    Grpc,
}

impl Protocol {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Grpc => "grpc",
        }
    }
}

/// One downstream call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallSpec {
    /// The callee's name.
    pub service: String,
    /// A failed optional call degrades the answer instead of failing it.
    #[serde(default)]
    pub optional: bool,
}

/// One service.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceSpec {
    /// Unique name.
    pub name: String,
    /// How callers reach it.
    pub protocol: Protocol,
    /// Its own work per request.
    pub latency: LatencySpec,
    /// Requests doing their own work at once; the rest queue.
    pub concurrency: u32,
    /// `timeouts` mode: the fresh timeout on each call it makes and on its own work.
    pub timeout_ms: u64,
    /// `propagated` mode: the least remaining budget it starts work with.
    #[serde(default)]
    pub min_budget_ms: u64,
    /// Where `hopbudget-demo serve` listens and peers connect.
    #[serde(default)]
    pub addr: Option<SocketAddr>,
    /// Downstream calls, made in parallel after its own work.
    #[serde(default)]
    pub calls: Vec<CallSpec>,
    /// Faults.
    #[serde(default)]
    pub faults: Vec<FaultSpec>,
    /// Background work handed over a queue after a successful answer (S11).
    #[serde(default)]
    pub background: Option<BackgroundSpec>,
    /// A cheaper path taken when the budget cannot pay for the full one.
    #[serde(default)]
    pub degrade: Option<DegradeSpec>,
    /// `propagated` mode, a leaf: at most this many requests wait for a slot in its admission
    /// queue; beyond, a newcomer is refused at once (0: refused whenever every slot is busy,
    /// the retry wave's callee). `None`: the library's default.
    #[serde(default)]
    pub queue_bound: Option<u32>,
}

impl ServiceSpec {
    /// Mean work time per request, faults included, ms.
    pub fn mean_work_ms(&self) -> f64 {
        let fault_share: f64 = self.faults.iter().map(|f| f.rate).sum::<f64>().min(1.0);
        let faulty: f64 = self
            .faults
            .iter()
            .map(|f| f.rate * f.latency.mean_ms())
            .sum();
        (1.0 - fault_share) * self.latency.mean_ms() + faulty
    }

    /// Requests per second this service can do its own work for.
    pub fn capacity_per_s(&self) -> f64 {
        f64::from(self.concurrency) * 1000.0 / self.mean_work_ms().max(0.001)
    }

    /// The `timeouts`-mode timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// The `propagated`-mode minimum budget.
    pub fn min_budget(&self) -> Duration {
        Duration::from_millis(self.min_budget_ms)
    }
}
