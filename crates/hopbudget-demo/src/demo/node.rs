//! One running service, [`Node`], and the decisions its mode makes for it, [`HopMode`].
//!
//! The two refer to each other (a node holds its mode; the mode acts on the node), so they
//! live in one file. A hop of any mode goes through the same body (`services::body`: wait
//! for a work slot, do its own work, call downstream in parallel, hand off background work);
//! the mode decides how the request is admitted and whether its work survives the caller
//! ([`HopMode::admit`]), whether the work still fits after queueing
//! ([`HopMode::before_work`]), how its own work and each outbound call are bounded
//! ([`HopMode::own_work`], [`HopMode::call`]), what a background message carries and how it
//! is consumed ([`HopMode::background_headers`], [`HopMode::consume`]), what the client
//! sends ([`HopMode::client_forward`]) and which of hopbudget's layers sit on the servers and
//! clients ([`HopMode::layers`]). Each mode lives in its own file under `behaviour/`.

use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use hopbudget::SharedProfile;
use hopbudget::degrade::Degrade;
use http::HeaderMap;
use rand::{Rng, SeedableRng, rngs::StdRng};
use tokio::sync::Semaphore;

use super::collector::{BackgroundOutcome, Collector};
use super::hop_error::HopError;
use super::mode::Mode;
use super::peer::Peer;
use super::queue::{Job, Producer};
use super::topology::{LatencySpec, ServiceSpec};

/// One running service.
#[derive(Debug)]
pub struct Node {
    /// Index in the topology.
    pub idx: usize,
    /// Its spec.
    pub spec: ServiceSpec,
    /// How this service behaves: its mode (a forgetful service, S13, has its own).
    pub behaviour: Arc<dyn HopMode>,
    /// The concurrency limit on its own work.
    pub sem: Semaphore,
    /// Downstream services, aligned with `spec.calls`, with their topology index.
    pub peers: Vec<(usize, Peer)>,
    /// Where measurements go.
    pub collector: Arc<Collector>,
    /// The adoption profile its hopbudget layers run with (min budget as a route); `serve`
    /// replaces it on SIGHUP (C24).
    pub profile: SharedProfile,
    /// The run's seed.
    pub seed: u64,
    /// Where this service hands its background work (S11), if it has any.
    pub queue: Option<Producer>,
    /// Its cheaper path, if the topology gives it one ([`degrade_for`](super::services::degrade_for)).
    pub degrade: Option<Degrade>,
}

impl Node {
    /// This service's own work for request `id`: sampled from the log-normal fitted to its
    /// p50/p99 (or to a fault's), seeded by (seed, service, request) so that every mode sees
    /// exactly the same work for the same request.
    pub fn work_for(&self, id: u64) -> Duration {
        let mut h = DefaultHasher::new();
        (self.seed, &self.spec.name, id).hash(&mut h);
        let mut rng = StdRng::seed_from_u64(h.finish());
        let pick: f64 = rng.random();
        let mut acc = 0.0;
        let mut latency = self.spec.latency;
        for f in &self.spec.faults {
            acc += f.rate;
            if pick < acc {
                latency = f.latency;
                break;
            }
        }
        sample(&mut rng, &latency)
    }

    /// The work of this service's cheaper path for request `id`, if it has one (seeded like
    /// [`Node::work_for`]).
    pub fn cheap_work_for(&self, id: u64) -> Duration {
        let Some(d) = &self.spec.degrade else {
            return Duration::ZERO;
        };
        let mut h = DefaultHasher::new();
        (self.seed, &self.spec.name, &d.path, id).hash(&mut h);
        sample(&mut StdRng::seed_from_u64(h.finish()), &d.latency)
    }

    /// This service's background work for request `id` (seeded like [`Node::work_for`]).
    pub fn background_for(&self, id: u64) -> Duration {
        let Some(bg) = &self.spec.background else {
            return Duration::ZERO;
        };
        let mut h = DefaultHasher::new();
        (self.seed, &bg.name, id).hash(&mut h);
        sample(&mut StdRng::seed_from_u64(h.finish()), &bg.latency)
    }
}

/// One draw from the log-normal fitted to `latency`.
fn sample(rng: &mut StdRng, latency: &LatencySpec) -> Duration {
    let (mu, sigma) = latency.lognormal();
    // Box-Muller: one standard normal from two uniforms.
    let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
    let u2: f64 = rng.random();
    let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
    let ms = (mu + sigma * z).exp().min(600_000.0);
    Duration::from_secs_f64(ms / 1000.0)
}

/// Which of hopbudget's layers a service runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layers {
    /// `GrpcServerLayer` / `ServerBudgetLayer` in front of the handler.
    pub server: bool,
    /// `GrpcClientLayer` / `BudgetMiddleware` on the outbound clients.
    pub client: bool,
}

/// The decisions in which the demo's modes differ; everything else is shared.
pub trait HopMode: fmt::Debug + Send + Sync + 'static {
    /// The mode's name.
    fn mode(&self) -> Mode;

    /// Which of hopbudget's layers the service and its clients run with.
    fn layers(&self) -> Layers;

    /// Whether a leaf service (one that calls nobody, so its hop is its own work) also runs
    /// hopbudget's admission layer inside its server layer: its `concurrency` slots, waiters
    /// served earliest-deadline-first and dropped once their budget no longer covers the
    /// p99 of the service's work (C21, S17). Only modes with the server layer can have it.
    fn admission(&self) -> bool {
        false
    }

    /// Admit one inbound request and run the hop body (`services::body`) under this mode's
    /// rules, recording the arrival and the terminal status in the collector. Whether the
    /// work survives a caller that goes away is decided here.
    fn admit(&self, node: Arc<Node>, id: u64) -> BoxFuture<'static, Result<u32, HopError>>;

    /// After the request waited for a work slot, before the work: may it still start?
    fn before_work(&self, node: &Node) -> Result<(), HopError>;

    /// This service's own work (`cost` long), bounded as the mode bounds it.
    fn own_work<'a>(
        &'a self,
        node: &'a Node,
        cost: Duration,
    ) -> BoxFuture<'a, Result<(), HopError>>;

    /// One outbound call to service `callee` through `peer`; returns how many optional calls
    /// below failed. Counts refusals and expiries as the caller sees them.
    fn call<'a>(
        &'a self,
        node: &'a Node,
        callee: usize,
        peer: &'a Peer,
        id: u64,
    ) -> BoxFuture<'a, Result<u32, HopError>>;

    /// The headers a background message handed off by `node` carries (S11).
    fn background_headers(&self, node: &Node) -> HeaderMap;

    /// Consume one background message.
    fn consume<'a>(&'a self, job: &'a Job) -> BoxFuture<'a, BackgroundOutcome>;

    /// The budget the client sends with its request, given its whole `budget`; `None` sends
    /// no deadline.
    fn client_forward(&self, budget: Duration) -> Option<Duration>;
}
