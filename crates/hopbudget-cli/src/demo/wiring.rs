//! The only place where the two modes differ: how a hop is admitted, how it bounds its own
//! work and its outbound calls, whether its work survives a caller that went away, what the
//! client sends, and how background work is handed over and consumed.
//!
//! - **`timeouts`**: every hop sets its own fresh timeout on each call it makes (the
//!   topology's `timeout_ms`), sends no deadline, and cancels nothing. The "nothing is
//!   cancelled" part is modelled by running each hop's handler on a *detached* task: when the
//!   caller's timeout fires and the call is dropped, the server-side work goes on, exactly as
//!   a service does that derives its outbound calls from a fresh `context.Background()`.
//! - **`propagated`**: hopbudget at every hop. The inbound budget is read from the wire
//!   (`grpc-timeout`, `x-request-timeout-ms`) and becomes a local monotonic deadline (C1); a
//!   hop with less than its route's minimum budget refuses before any work (C3); the handler
//!   stops at the deadline (C4, C7) or when the caller goes away (C5); each outbound call
//!   forwards `remaining - margin - transit` (C2), refuses to start below the threshold (C3),
//!   and is itself bounded by the budget.
//! - **`--forgetful SERVICE`** (S13): in propagated mode that one service behaves like the
//!   timeouts mode on the way in: it ignores the inbound deadline, starts a fresh budget of its
//!   own default, forwards *that* downstream (the chain break), and its work survives its
//!   caller.
//!
//! The propagated wiring is hopbudget's own layers, as a service would use them: the gRPC
//! servers run behind `grpc::server::GrpcServerLayer`, the HTTP servers behind
//! `http::server::ServerBudgetLayer` (both with a profile per service whose route minimum is
//! the service's `min_budget_ms`), gRPC clients are wrapped in `grpc::client::GrpcClientLayer`
//! and the HTTP client carries `http::reqwest::BudgetMiddleware`. Inside a handler the budget
//! is the ambient `RequestBudget::current()` the server layer installed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::serve::ListenerExt;
use hopbudget::clock::{SystemClock, WallClock};
use hopbudget::codec::{self, Carrier};
use hopbudget::grpc::client::{GrpcClient, GrpcClientLayer};
use hopbudget::grpc::server::GrpcServerLayer;
use hopbudget::http::reqwest::{BudgetMiddleware, budget_error};
use hopbudget::http::server::ServerBudgetLayer;
use hopbudget::status::{REFUSED_METADATA, REMAINING_MS_HEADER, REQUIRED_MS_HEADER};
use hopbudget::{BudgetError, Deadline, HopPolicy, Outcome, Profile, RequestBudget, Source};
use reqwest_middleware::ClientWithMiddleware;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tower::ServiceBuilder;

use super::collector::BackgroundOutcome;
use super::queue::{Job, Producer};
use super::services::{self, GrpcNode, HTTP_PATH, Node, REQUEST_ID};
use super::topology::{Protocol, ServiceSpec, Topology};
use crate::proto::hop_client::HopClient;
use crate::proto::hop_server::HopServer;
use crate::proto::{HopReply, HopRequest};

/// Which behaviour every hop has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Per-hop fresh timeouts, no propagation, no cancellation.
    Timeouts,
    /// hopbudget everywhere.
    Propagated,
}

impl Mode {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Timeouts => "timeouts",
            Mode::Propagated => "propagated",
        }
    }
}

/// How a hop failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HopError {
    /// Refused before work (C3): required and remaining.
    Refused(Duration, Duration),
    /// The time limit fired.
    Expired,
    /// The caller went away.
    Cancelled,
    /// A malformed deadline header (C9).
    Malformed(String),
    /// Anything else.
    Failed(String),
}

impl HopError {
    fn outcome(&self) -> (Outcome, bool) {
        match self {
            HopError::Refused(..) => (Outcome::Refused, false),
            HopError::Expired => (Outcome::Expired, false),
            HopError::Cancelled => (Outcome::Cancelled, false),
            HopError::Malformed(_) | HopError::Failed(_) => (Outcome::Completed, true),
        }
    }
}

impl From<BudgetError> for HopError {
    fn from(e: BudgetError) -> Self {
        match e {
            BudgetError::Refused(r) => HopError::Refused(r.required(), r.remaining()),
            BudgetError::Cancelled => HopError::Cancelled,
            _ => HopError::Expired,
        }
    }
}

fn propagates(node: &Node) -> bool {
    node.mode == Mode::Propagated && !node.forgetful
}

/// Serve one inbound request (either protocol): admit it, run the hop body, record the
/// terminal status.
pub async fn serve(node: Arc<Node>, id: u64) -> Result<u32, HopError> {
    if !propagates(&node) {
        // A fresh budget of the service's own default when forgetful (it then propagates
        // that reset budget, S13); no budget at all in timeouts mode.
        let budget = (node.mode == Mode::Propagated).then(|| {
            RequestBudget::new(
                Deadline::after(node.spec.timeout()),
                Source::Local,
                node.profile.policy(),
            )
        });
        let guard = node.collector.arrive(
            node.idx,
            id,
            budget.as_ref().map(RequestBudget::remaining),
            None,
        );
        let task_node = node.clone();
        // Detached: nothing stops this work when the caller goes away.
        let handle = tokio::spawn(async move {
            let result = match budget {
                Some(b) => match b.run(services::body(task_node, id)).await {
                    Ok(r) => r,
                    Err(e) => Err(e.into()),
                },
                None => services::body(task_node, id).await,
            };
            let (outcome, failed) = match &result {
                Ok(_) => (Outcome::Completed, false),
                Err(e) => e.outcome(),
            };
            guard.finish(outcome, failed);
            result
        });
        return handle
            .await
            .unwrap_or_else(|e| Err(HopError::Failed(format!("handler task failed: {e}"))));
    }

    // The server layer read the inbound budget, refused calls below the route minimum
    // before this handler (C3), and installed the budget in the task-local scope; it drops
    // this future at the deadline (C4, C7) or when the caller resets the call (C5).
    let Some(budget) = RequestBudget::current() else {
        return Err(HopError::Failed(
            "no request budget: the server layer is missing".into(),
        ));
    };
    let guard = node.collector.arrive(
        node.idx,
        id,
        Some(budget.at_arrival()),
        Some(budget.clone()),
    );
    let result = services::body(node.clone(), id).await;
    let (outcome, failed) = match &result {
        Ok(_) => (Outcome::Completed, false),
        Err(e) => e.outcome(),
    };
    guard.finish(outcome, failed);
    result
}

/// After queueing for a work slot, before the work: in propagated mode the work must still
/// fit in the remaining budget (C3).
pub fn before_work(node: &Node) -> Result<(), HopError> {
    if node.mode != Mode::Propagated {
        return Ok(());
    }
    match RequestBudget::current() {
        Some(b) => b.admit(node.spec.min_budget()).map_err(HopError::from),
        None => Ok(()),
    }
}

/// This service's own work (a sidecar call, a model evaluation), bounded by its own timeout
/// in timeouts mode; in propagated mode the budget's `run` already bounds it.
pub async fn own_work(node: &Node, cost: Duration) -> Result<(), HopError> {
    if node.mode == Mode::Timeouts {
        return tokio::time::timeout(node.spec.timeout(), tokio::time::sleep(cost))
            .await
            .map_err(|_| HopError::Expired);
    }
    tokio::time::sleep(cost).await;
    Ok(())
}

/// One outbound call to `callee`.
pub async fn call(node: &Node, callee: usize, peer: &Peer, id: u64) -> Result<u32, HopError> {
    if node.mode == Mode::Timeouts {
        let result = match tokio::time::timeout(node.spec.timeout(), send(peer, id)).await {
            Ok(r) => r,
            Err(_) => Err(HopError::Expired),
        };
        if result == Err(HopError::Expired) {
            node.collector.expired(callee);
        }
        return result;
    }
    // The client layers take the ambient budget, refuse locally below the threshold (no
    // connection, no bytes, C3), stamp the forward budget (C2) and bound the wait.
    let result = send(peer, id).await;
    match result {
        Err(HopError::Refused(..)) => node.collector.refused(callee),
        Err(HopError::Expired) => node.collector.expired(callee),
        _ => {}
    }
    result
}

async fn send(peer: &Peer, id: u64) -> Result<u32, HopError> {
    match peer {
        Peer::Grpc(client) => grpc_reply(client.clone().call(grpc_request(id)).await),
        Peer::GrpcBudget(client) => grpc_reply(client.clone().call(grpc_request(id)).await),
        Peer::Http { client, url } => {
            let resp = match client.post(url).header(REQUEST_ID, id).send().await {
                Ok(r) => r,
                Err(e) => {
                    return Err(match budget_error(&e) {
                        Some(b) => HopError::from(*b),
                        None => HopError::Failed(format!("HTTP call failed: {e}")),
                    });
                }
            };
            match resp.status().as_u16() {
                200 => {
                    let v: serde_json::Value = resp
                        .json()
                        .await
                        .map_err(|e| HopError::Failed(format!("bad reply: {e}")))?;
                    Ok(v["degraded"].as_u64().unwrap_or(0) as u32)
                }
                503 => Err(HopError::Refused(
                    ms_header(resp.headers(), REQUIRED_MS_HEADER),
                    ms_header(resp.headers(), REMAINING_MS_HEADER),
                )),
                504 => Err(HopError::Expired),
                499 => Err(HopError::Cancelled),
                s => Err(HopError::Failed(format!("HTTP status {s}"))),
            }
        }
    }
}

fn grpc_request(id: u64) -> tonic::Request<HopRequest> {
    let mut req = tonic::Request::new(HopRequest { request_id: id });
    req.metadata_mut()
        .insert(REQUEST_ID, tonic::metadata::MetadataValue::from(id));
    req
}

fn grpc_reply(r: Result<tonic::Response<HopReply>, tonic::Status>) -> Result<u32, HopError> {
    match r {
        Ok(reply) => Ok(reply.into_inner().degraded),
        Err(status) => Err(from_grpc(&status)),
    }
}

fn ms_header(h: &HeaderMap, name: &str) -> Duration {
    Duration::from_millis(
        h.get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    )
}

fn from_grpc(status: &tonic::Status) -> HopError {
    let md = status.metadata();
    let meta_ms = |name: &str| {
        Duration::from_millis(
            md.get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
        )
    };
    match status.code() {
        tonic::Code::DeadlineExceeded
            if md.get(REFUSED_METADATA).and_then(|v| v.to_str().ok()) == Some("refused") =>
        {
            HopError::Refused(meta_ms(REQUIRED_MS_HEADER), meta_ms(REMAINING_MS_HEADER))
        }
        tonic::Code::DeadlineExceeded => HopError::Expired,
        // tonic's server enforces `grpc-timeout` itself and answers CANCELLED "Timeout
        // expired" when it fires first; that is an expiry (C4).
        tonic::Code::Cancelled if status.message().contains("Timeout expired") => HopError::Expired,
        tonic::Code::Cancelled => HopError::Cancelled,
        tonic::Code::InvalidArgument => HopError::Malformed(status.message().to_string()),
        _ => HopError::Failed(format!("{:?}: {}", status.code(), status.message())),
    }
}

/// The gRPC status for a hop error, spelled by the service's profile (C10).
pub fn grpc_status(node: &Node, e: &HopError) -> tonic::Status {
    let map = node.profile.grpc_status();
    let code = |o: Outcome| {
        tonic::Code::from_i32(
            map.for_outcome(o)
                .map_or(tonic::Code::Unknown as i32, |c| c.as_i32()),
        )
    };
    match e {
        HopError::Refused(required, remaining) => {
            let mut s = tonic::Status::new(
                code(Outcome::Refused),
                format!(
                    "refused before start: needs {} ms, {} ms remain",
                    required.as_millis(),
                    remaining.as_millis()
                ),
            );
            let md = s.metadata_mut();
            md.insert(
                REFUSED_METADATA,
                tonic::metadata::MetadataValue::from_static("refused"),
            );
            md.insert(REQUIRED_MS_HEADER, (required.as_millis() as u64).into());
            md.insert(REMAINING_MS_HEADER, (remaining.as_millis() as u64).into());
            s
        }
        HopError::Expired => tonic::Status::new(code(Outcome::Expired), "deadline expired"),
        HopError::Cancelled => tonic::Status::new(code(Outcome::Cancelled), "caller went away"),
        HopError::Malformed(m) => tonic::Status::invalid_argument(m.clone()),
        HopError::Failed(m) => tonic::Status::unavailable(m.clone()),
    }
}

/// The HTTP response for a hop error, spelled by the service's profile (C10).
pub fn http_response(node: &Node, e: &HopError) -> Response {
    let map = node.profile.http_status();
    let status = |o: Outcome, fallback: u16| {
        StatusCode::from_u16(map.for_outcome(o).unwrap_or(fallback))
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    };
    match e {
        HopError::Refused(required, remaining) => {
            let mut r = (status(Outcome::Refused, 503), "refused before start").into_response();
            let h = r.headers_mut();
            h.insert("retry-after", HeaderValue::from_static("0"));
            h.insert(REFUSED_METADATA, HeaderValue::from_static("refused"));
            h.insert(
                REQUIRED_MS_HEADER,
                HeaderValue::from(required.as_millis() as u64),
            );
            h.insert(
                REMAINING_MS_HEADER,
                HeaderValue::from(remaining.as_millis() as u64),
            );
            r
        }
        HopError::Expired => (status(Outcome::Expired, 504), "deadline expired").into_response(),
        HopError::Cancelled => {
            (status(Outcome::Cancelled, 499), "caller went away").into_response()
        }
        HopError::Malformed(m) => (StatusCode::BAD_REQUEST, m.clone()).into_response(),
        HopError::Failed(m) => (StatusCode::BAD_GATEWAY, m.clone()).into_response(),
    }
}

/// How a node reaches one downstream service.
#[derive(Clone, Debug)]
pub enum Peer {
    /// A gRPC service, plain tonic (timeouts mode).
    Grpc(HopClient<Channel>),
    /// A gRPC service behind hopbudget's client layer (propagated mode).
    GrpcBudget(HopClient<GrpcClient<Channel>>),
    /// An HTTP service.
    Http {
        /// The client (with `BudgetMiddleware` in propagated mode).
        client: ClientWithMiddleware,
        /// `http://addr/call`.
        url: String,
    },
}

/// HTTP/2 over cleartext (prior knowledge), so a dropped call resets its stream and the
/// server sees the caller go away.
pub fn reqwest_client() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .http2_prior_knowledge()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(64)
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// How `spec` reaches each service it calls, at `addrs` (aligned with `topo.services`).
pub fn peers_for(
    topo: &Topology,
    spec: &ServiceSpec,
    mode: Mode,
    profile: &Profile,
    addrs: &[SocketAddr],
    http: &reqwest::Client,
) -> Result<Vec<(usize, Peer)>, String> {
    let mut builder = reqwest_middleware::ClientBuilder::new(http.clone());
    if mode == Mode::Propagated {
        builder = builder.with(BudgetMiddleware::new(profile.clone()));
    }
    let http = builder.build();
    let mut peers = Vec::with_capacity(spec.calls.len());
    for call in &spec.calls {
        let idx = topo
            .index_of(&call.service)
            .ok_or_else(|| format!("no service named `{}`", call.service))?;
        let addr = addrs[idx];
        let peer = match topo.services[idx].protocol {
            Protocol::Grpc => {
                let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
                    .map_err(|e| format!("{}: bad address {addr}: {e}", call.service))?
                    .tcp_nodelay(true)
                    .connect_lazy();
                match mode {
                    Mode::Timeouts => Peer::Grpc(HopClient::new(channel)),
                    Mode::Propagated => Peer::GrpcBudget(HopClient::new(
                        ServiceBuilder::new()
                            .layer(GrpcClientLayer::new(profile.clone()))
                            .service(channel),
                    )),
                }
            }
            Protocol::Http => Peer::Http {
                client: http.clone(),
                url: format!("http://{addr}{HTTP_PATH}"),
            },
        };
        peers.push((idx, peer));
    }
    Ok(peers)
}

/// Serve `node` on `listener` until `stop` is cancelled: behind hopbudget's server layer in
/// propagated mode (except a forgetful service, which has none: S13).
pub fn spawn_server(node: Arc<Node>, listener: TcpListener, stop: CancellationToken) {
    let layered = propagates(&node);
    let profile = node.profile.clone();
    match node.spec.protocol {
        Protocol::Grpc => {
            let svc = HopServer::new(GrpcNode(node));
            let incoming = accept_stream(listener);
            let mut builder = tonic::transport::Server::builder()
                .tcp_nodelay(true)
                .max_concurrent_streams(Some(100_000));
            tokio::spawn(async move {
                let _ = if layered {
                    builder
                        .layer(GrpcServerLayer::new(profile))
                        .add_service(svc)
                        .serve_with_incoming_shutdown(incoming, stop.cancelled_owned())
                        .await
                } else {
                    builder
                        .add_service(svc)
                        .serve_with_incoming_shutdown(incoming, stop.cancelled_owned())
                        .await
                };
            });
        }
        Protocol::Http => {
            let mut app = axum::Router::new()
                .route(HTTP_PATH, axum::routing::post(services::http_call))
                .with_state(node);
            if layered {
                app = app.layer(ServerBudgetLayer::new(profile));
            }
            // Small responses must not wait for a delayed ACK (Nagle): 40 ms stalls otherwise.
            let listener = listener.tap_io(|tcp| {
                let _ = tcp.set_nodelay(true);
            });
            tokio::spawn(async move {
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(stop.cancelled_owned())
                    .await;
            });
        }
    }
}

fn accept_stream(
    listener: TcpListener,
) -> impl futures_util::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures_util::stream::unfold(listener, |l| async move {
        let accepted = l.accept().await.map(|(s, _)| {
            let _ = s.set_nodelay(true);
            s
        });
        Some((accepted, l))
    })
}

/// Hand background work over the queue (S11). Propagated: the message carries a deadline of
/// its own, rooted now and linked to the request's budget only for tracing (C12), as an
/// absolute `deadline-epoch-ms` header; timeouts: no deadline at all.
pub fn hand_off(node: &Node, queue: &Producer, id: u64) {
    let Some(bg) = &node.spec.background else {
        return;
    };
    let mut headers = HeaderMap::new();
    if node.mode == Mode::Propagated {
        let own = Duration::from_millis(bg.deadline_ms);
        let budget = match RequestBudget::current() {
            Some(request) => request.detach(own),
            None => RequestBudget::local(own, node.profile.policy()),
        };
        let stamp = codec::epoch::encode(budget.remaining(), SystemClock.now_unix_ms());
        headers.insert(codec::QUEUE_DEADLINE_EPOCH_MS, stamp.to_header_value());
    }
    node.collector.background_scheduled(id);
    let job = Job {
        id,
        headers,
        work: node.background_for(id),
        scheduled: tokio::time::Instant::now(),
    };
    if let Err(e) = queue.send(job) {
        node.collector
            .background_done(e.0.id, BackgroundOutcome::DroppedExpired);
    }
}

/// Consume one queued message. Propagated: check its deadline before any work and drop it
/// if it passed in the queue (S10), else run it bounded by that deadline; timeouts: run it.
pub async fn consume(mode: Mode, job: &Job) -> BackgroundOutcome {
    if mode == Mode::Timeouts {
        tokio::time::sleep(job.work).await;
        return BackgroundOutcome::Sent;
    }
    let inbound = job
        .headers
        .get(codec::QUEUE_DEADLINE_EPOCH_MS)
        .and_then(|v| {
            Carrier::Queue
                .decode(v.as_bytes(), || SystemClock.now_unix_ms())
                .ok()
        });
    let Some(left) = inbound else {
        return BackgroundOutcome::DroppedExpired;
    };
    if left.is_zero() {
        return BackgroundOutcome::DroppedExpired;
    }
    let budget = RequestBudget::from_carrier(Carrier::Queue, left, HopPolicy::DEFAULT);
    match budget.run(tokio::time::sleep(job.work)).await {
        Ok(()) => BackgroundOutcome::Sent,
        Err(_) => BackgroundOutcome::Expired,
    }
}

/// The client's request to the edge. Propagated: the client is the first hop and forwards
/// its budget less its own margin and the transit allowance (C2), in `x-request-timeout-ms`;
/// timeouts: it sends no deadline, only waits for its own timeout.
pub fn client_request(
    mode: Mode,
    req: reqwest::RequestBuilder,
    budget: Duration,
) -> reqwest::RequestBuilder {
    if mode == Mode::Timeouts {
        return req;
    }
    let own = RequestBudget::local(budget, HopPolicy::DEFAULT);
    req.header(
        codec::REQUEST_TIMEOUT_MS,
        codec::millis::encode(own.forward()).to_header_value(),
    )
}
