//! The topology's services as real servers: gRPC (tonic) or HTTP (axum) on their own ports,
//! each doing its own sampled work under a concurrency limit and then calling its downstream
//! services in parallel.
//!
//! This module is the same in every mode. Everything that differs between them (how an
//! inbound request is admitted, how an outbound call is bounded, whether work survives its
//! caller) is the node's [`HopMode`], one file per mode under `mode/`.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::future::join_all;
use hopbudget::degrade::{Choice, Degrade};
use hopbudget::profile::{AdmissionRouteSpec, AdmissionSpec, ProfileSpec, RouteSpec};
use hopbudget::{Profile, RequestBudget, SharedProfile};
use rand::{Rng, SeedableRng, rngs::StdRng};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tracing::Instrument as _;

use super::collector::Collector;
use super::mode::HopMode;
use super::queue::Producer;
use super::topology::{LatencySpec, Protocol, ServiceSpec, Topology};
use super::traces;
use super::wiring::{self, HopError, Peer};
use crate::proto::hop_server::Hop;
use crate::proto::{HopReply, HopRequest};

/// The header (and gRPC metadata key) carrying the client's request id.
pub const REQUEST_ID: &str = "x-demo-request-id";
/// The gRPC method path every gRPC service serves.
pub const GRPC_PATH: &str = "/hopbudget.demo.Hop/Call";
/// The HTTP path every HTTP service serves.
pub const HTTP_PATH: &str = "/call";

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
    /// Its cheaper path, if the topology gives it one ([`degrade_for`]).
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

/// The mode-independent body of a hop: queue for a work slot, do this service's own work,
/// then call every downstream service in parallel. Returns how many parts of the answer are
/// degraded: optional calls that failed, and cheaper paths taken here or below.
pub async fn body(node: Arc<Node>, id: u64) -> Result<u32, HopError> {
    let cost = node.work_for(id);
    let mut degraded = 0;
    {
        let _permit = node
            .sem
            .acquire()
            .await
            .map_err(|_| HopError::Failed("service is shutting down".into()))?;
        // After queueing, check again that the work still fits (C3, S2).
        node.behaviour.before_work(&node)?;
        let _work = node.collector.work(node.idx, id);
        // With a cheaper path and a budget, the budget left picks the path (the choice is on
        // a `degrade` span and in `hopbudget_degraded_total`); without a budget nothing is
        // known to save time for, and the full path runs.
        match (&node.degrade, &node.spec.degrade, RequestBudget::current()) {
            (Some(d), Some(spec), Some(budget)) => {
                let cheap = node.cheap_work_for(id);
                let (choice, result) = d
                    .run(
                        &budget,
                        spec.full_cost(),
                        || node.behaviour.own_work(&node, cost),
                        || node.behaviour.own_work(&node, cheap),
                    )
                    .await;
                result?;
                degraded += u32::from(choice == Choice::Cheap);
            }
            _ => node.behaviour.own_work(&node, cost).await?,
        }
    }
    let calls = node
        .peers
        .iter()
        .map(|(callee, peer)| node.behaviour.call(&node, *callee, peer, id));
    let results = join_all(calls).await;
    for (result, call) in results.into_iter().zip(&node.spec.calls) {
        match result {
            Ok(d) => degraded += d,
            Err(_) if call.optional => degraded += 1,
            Err(e) => return Err(e),
        }
    }
    if let Some(queue) = &node.queue {
        wiring::hand_off(&node, queue, id);
    }
    Ok(degraded)
}

/// The route a service serves: its gRPC method or its HTTP path.
pub fn route_of(spec: &ServiceSpec) -> &'static str {
    match spec.protocol {
        Protocol::Grpc => GRPC_PATH,
        Protocol::Http => HTTP_PATH,
    }
}

/// The [`Degrade`] of a service whose topology gives it a cheaper path.
pub fn degrade_for(spec: &ServiceSpec) -> Option<Degrade> {
    let d = spec.degrade.as_ref()?;
    Some(Degrade::new(
        spec.name.clone(),
        route_of(spec),
        d.path.clone(),
    ))
}

/// Serve one inbound request with its `headers`, in the hop's span: hopbudget's, opened by
/// the server layer around this handler, or the demo's own where the mode has no server
/// layer (see [`traces`]).
async fn handle(node: Arc<Node>, id: u64, headers: &HeaderMap) -> Result<u32, HopError> {
    if node.behaviour.layers().server {
        traces::annotate(&tracing::Span::current(), id, headers);
        return wiring::serve(node, id).await;
    }
    let span = traces::own_span(&node.spec, route_of(&node.spec), headers);
    traces::annotate(&span, id, headers);
    wiring::serve(node, id).instrument(span).await
}

/// The profile a service's hopbudget layers run with: its name, its minimum budget as a
/// route rule on the path it serves, and its concurrency as the admission limit with its
/// work's p99 as the admission cost.
pub fn profile_for(spec: &ServiceSpec) -> Result<Profile, String> {
    let path = route_of(spec);
    let routes = if spec.min_budget_ms > 0 {
        vec![RouteSpec {
            path: path.into(),
            min_budget_ms: Some(spec.min_budget_ms as i64),
            mode: Default::default(),
            learn: None,
        }]
    } else {
        Vec::new()
    };
    let profile_spec = ProfileSpec {
        service: spec.name.clone(),
        routes,
        // The service's slots as an admission section (EDF), used where the mode puts the
        // admission layer (C21). The cost is the work's p99 (`admission_cost_ms`), not the
        // minimum budget: past
        // capacity EDF grants a slot to the waiter closest to its refusal instant, so a
        // request starts with little more than the cost left, and work longer than the cost
        // expires half done (with reco-scorer's 180 ms minimum against a 180/240 ms p50/p99
        // that was 3 admitted requests in 10, a third of its slot time, at 3x capacity).
        admission: Some(AdmissionSpec {
            limit: i64::from(spec.concurrency),
            routes: vec![AdmissionRouteSpec {
                path: path.into(),
                cost_ms: admission_cost_ms(spec) as i64,
            }],
            ..AdmissionSpec::default()
        }),
        ..ProfileSpec::default()
    };
    Profile::from_spec(profile_spec).map_err(|issues| {
        issues
            .iter()
            .map(|i| format!("{}: {}", i.field, i.reason))
            .collect::<Vec<_>>()
            .join("; ")
    })
}

/// What a waiter must still have left to be given a slot: the p99 of the work the hop will
/// do. A hop with a cheaper path (`degrade`) can still answer with that path's work, so a
/// waiter is refused only below the cheaper path's p99; with more left, the hop picks the path
/// itself when its work starts.
pub fn admission_cost_ms(spec: &ServiceSpec) -> u64 {
    let work = match &spec.degrade {
        Some(d) => d.latency.p99_ms.ceil() as u64,
        None => work_p99_ms(spec),
    };
    work.max(spec.min_budget_ms)
}

/// The p99 of a service's own work, whole ms rounded up: the largest of its latency's and its
/// faults' (an upper bound of the mixture's).
pub fn work_p99_ms(spec: &ServiceSpec) -> u64 {
    spec.faults
        .iter()
        .filter(|f| f.rate > 0.0)
        .map(|f| f.latency.p99_ms)
        .fold(spec.latency.p99_ms, f64::max)
        .ceil() as u64
}

/// A bound listener per service, so every address is known before any service starts.
pub async fn bind_all(
    topo: &Topology,
    addr_of: impl Fn(&ServiceSpec) -> SocketAddr,
) -> std::io::Result<Vec<(TcpListener, SocketAddr)>> {
    let mut out = Vec::with_capacity(topo.services.len());
    for s in &topo.services {
        let l = TcpListener::bind(addr_of(s)).await.map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("{}: cannot bind {}: {e}", s.name, addr_of(s)),
            )
        })?;
        let addr = l.local_addr()?;
        out.push((l, addr));
    }
    Ok(out)
}

/// The gRPC face of a node.
#[derive(Debug)]
pub struct GrpcNode(pub Arc<Node>);

#[tonic::async_trait]
impl Hop for GrpcNode {
    async fn call(
        &self,
        request: tonic::Request<HopRequest>,
    ) -> Result<tonic::Response<HopReply>, tonic::Status> {
        let id = request.get_ref().request_id;
        let headers = request.metadata().clone().into_headers();
        match handle(self.0.clone(), id, &headers).await {
            Ok(degraded) => Ok(tonic::Response::new(HopReply {
                service: self.0.spec.name.clone(),
                degraded,
            })),
            Err(e) => Err(wiring::grpc_status(&self.0, &e)),
        }
    }
}

/// The HTTP face of a node: `POST /call`.
pub async fn http_call(State(node): State<Arc<Node>>, headers: HeaderMap) -> Response {
    let Some(id) = headers
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
    else {
        return (
            StatusCode::BAD_REQUEST,
            format!("missing or malformed `{REQUEST_ID}` header"),
        )
            .into_response();
    };
    match handle(node.clone(), id, &headers).await {
        Ok(degraded) => (
            StatusCode::OK,
            axum::Json(serde_json::json!({ "service": node.spec.name, "degraded": degraded })),
        )
            .into_response(),
        Err(e) => wiring::http_response(&node, &e),
    }
}
