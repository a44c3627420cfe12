//! The plumbing every mode shares: the error a hop ends with and how it is spelled on the
//! wire and read back, how a node reaches its peers, and how its server is started. Which of
//! hopbudget's layers a server and its clients get is the mode's decision
//! ([`HopMode::layers`](super::mode::HopMode::layers)); everything else that differs between
//! modes lives in `mode/`.
//!
//! Replies are read back with the library's own helpers (`hopbudget::grpc::outcome` and
//! `refusal` for gRPC, `hopbudget::http::client::classify` for HTTP), never by matching
//! status text, so an expiry anywhere below is an expiry here too (C4).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::serve::ListenerExt;
use hopbudget::admission::AdmissionLayer;
use hopbudget::grpc::client::{GrpcClient, GrpcClientLayer};
use hopbudget::grpc::server::GrpcServerLayer;
use hopbudget::http::reqwest::{BudgetMiddleware, budget_error};
use hopbudget::http::server::ServerBudgetLayer;
use hopbudget::status::{OUTCOME_METADATA, REMAINING_MS_HEADER, REQUIRED_MS_HEADER};
use hopbudget::{BudgetError, Outcome, Refused, SharedProfile};
use reqwest_middleware::ClientWithMiddleware;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tower::ServiceBuilder;

use super::collector::BackgroundOutcome;
use super::queue::{Job, Producer};
use super::services::{self, GrpcNode, HTTP_PATH, Node, REQUEST_ID};
use super::topology::{Protocol, ServiceSpec, Topology};
use super::traces;
use crate::proto::hop_client::HopClient;
use crate::proto::hop_server::HopServer;
use crate::proto::{HopReply, HopRequest};

/// How a hop failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HopError {
    /// A budget stopped it: refused before work (C3), expired (C4) or cancelled (C5), here
    /// or, as the reply said, below.
    Budget(BudgetError),
    /// A per-hop fresh timeout fired (`timeouts` and `detached` modes: there is no budget).
    TimedOut,
    /// A malformed deadline header (C9).
    Malformed(String),
    /// Anything else.
    Failed(String),
}

impl HopError {
    /// The terminal status this error stands for; application failures are `completed`
    /// (the hop ended on time, whatever it answered).
    pub fn outcome(&self) -> Outcome {
        match self {
            HopError::Budget(e) => e.outcome(),
            HopError::TimedOut => Outcome::Expired,
            HopError::Malformed(_) | HopError::Failed(_) => Outcome::Completed,
        }
    }
}

/// The terminal status of a hop's result.
pub fn outcome_of<T>(result: &Result<T, HopError>) -> Outcome {
    result
        .as_ref()
        .err()
        .map_or(Outcome::Completed, HopError::outcome)
}

/// Whether a hop's result is an application failure (not a deadline outcome).
pub fn failed<T>(result: &Result<T, HopError>) -> bool {
    matches!(result, Err(HopError::Malformed(_) | HopError::Failed(_)))
}

/// Count how a call to `callee` ended, as its caller saw it: refusals and expiries are
/// counted here because the callee may never have seen them (its caller refused locally, or
/// its server layer answered before the handler).
pub fn count_at_caller<T>(node: &Node, callee: usize, result: &Result<T, HopError>) {
    match result.as_ref().err().map(HopError::outcome) {
        Some(Outcome::Refused) => node.collector.refused(callee),
        Some(Outcome::Expired) => node.collector.expired(callee),
        _ => {}
    }
}

/// Serve one inbound request (either protocol) as the node's mode admits it.
pub async fn serve(node: Arc<Node>, id: u64) -> Result<u32, HopError> {
    node.behaviour.admit(node.clone(), id).await
}

/// Send one call through `peer`, with no bound of its own: the mode bounds it. The trace
/// context goes with it: written by hopbudget's client layers where the peer has them, by
/// the plain OpenTelemetry glue ([`traces::inject`]) where it has not.
pub async fn send(peer: &Peer, id: u64) -> Result<u32, HopError> {
    match peer {
        Peer::Grpc(client) => {
            let mut req = grpc_request(id);
            traces::inject_grpc(req.metadata_mut());
            grpc_reply(client.clone().call(req).await)
        }
        Peer::GrpcBudget(client) => grpc_reply(client.clone().call(grpc_request(id)).await),
        Peer::Http {
            client,
            url,
            layered,
        } => {
            let mut headers = HeaderMap::new();
            if !layered {
                traces::inject(&mut headers);
            }
            let sent = client
                .post(url)
                .header(REQUEST_ID, id)
                .headers(headers)
                .send()
                .await;
            let resp = match sent {
                Ok(r) => r,
                Err(e) => {
                    return Err(match budget_error(&e) {
                        Some(b) => HopError::Budget(*b),
                        None => HopError::Failed(format!("HTTP call failed: {e}")),
                    });
                }
            };
            let status = resp.status().as_u16();
            if status == 200 {
                let v: serde_json::Value = resp
                    .json()
                    .await
                    .map_err(|e| HopError::Failed(format!("bad reply: {e}")))?;
                return Ok(v["degraded"].as_u64().unwrap_or(0) as u32);
            }
            Err(from_http(status, resp.headers()))
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

/// A gRPC error status read back as a hop error, with the library's reading of deadline
/// statuses (`hopbudget::grpc::outcome`, `refusal`).
pub fn from_grpc(status: &tonic::Status) -> HopError {
    match hopbudget::grpc::outcome(status) {
        Some(Outcome::Refused) => HopError::Budget(BudgetError::Refused(
            hopbudget::grpc::refusal(status)
                .unwrap_or(Refused::new(Duration::ZERO, Duration::ZERO)),
        )),
        Some(Outcome::Expired) => HopError::Budget(BudgetError::Expired),
        Some(Outcome::Cancelled) => HopError::Budget(BudgetError::Cancelled),
        _ if status.code() == tonic::Code::InvalidArgument => {
            HopError::Malformed(status.message().to_string())
        }
        _ => HopError::Failed(format!("{:?}: {}", status.code(), status.message())),
    }
}

/// An HTTP error status read back as a hop error, with the library's classification
/// (`hopbudget::http::client::classify`, default status map).
pub fn from_http(status: u16, headers: &HeaderMap) -> HopError {
    let map = hopbudget::status::HttpStatusMap::default();
    match hopbudget::http::client::classify(&map, status, headers) {
        Outcome::Refused => HopError::Budget(BudgetError::Refused(Refused::new(
            ms_header(headers, REQUIRED_MS_HEADER),
            ms_header(headers, REMAINING_MS_HEADER),
        ))),
        Outcome::Expired => HopError::Budget(BudgetError::Expired),
        Outcome::Cancelled => HopError::Budget(BudgetError::Cancelled),
        Outcome::Completed if status == 400 => HopError::Malformed(format!("HTTP status {status}")),
        Outcome::Completed => HopError::Failed(format!("HTTP status {status}")),
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

/// The gRPC status for a hop error, spelled by the service's profile (C10) through the
/// library's `hopbudget::grpc::budget_status`.
pub fn grpc_status(node: &Node, e: &HopError) -> tonic::Status {
    match e {
        HopError::Budget(b) => {
            hopbudget::grpc::budget_status(b, node.profile.current().grpc_status())
        }
        // A service without hopbudget spells its own timeout plainly, with no marker.
        HopError::TimedOut => tonic::Status::deadline_exceeded("timeout"),
        HopError::Malformed(m) => tonic::Status::invalid_argument(m.clone()),
        HopError::Failed(m) => tonic::Status::unavailable(m.clone()),
    }
}

/// The HTTP response for a hop error, spelled by the service's profile (C10).
pub fn http_response(node: &Node, e: &HopError) -> Response {
    let map = *node.profile.current().http_status();
    let status = |o: Outcome, fallback: u16| {
        StatusCode::from_u16(map.for_outcome(o).unwrap_or(fallback))
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    };
    match e {
        HopError::Budget(BudgetError::Refused(r)) => {
            let mut resp = (status(Outcome::Refused, 503), "refused before start").into_response();
            let h = resp.headers_mut();
            h.insert("retry-after", HeaderValue::from_static("0"));
            h.insert(OUTCOME_METADATA, HeaderValue::from_static("refused"));
            h.insert(
                REQUIRED_MS_HEADER,
                HeaderValue::from(r.required().as_millis() as u64),
            );
            h.insert(
                REMAINING_MS_HEADER,
                HeaderValue::from(r.remaining().as_millis() as u64),
            );
            resp
        }
        HopError::Budget(b) => {
            let o = b.outcome();
            let mut resp = (status(o, 504), b.to_string()).into_response();
            resp.headers_mut()
                .insert(OUTCOME_METADATA, HeaderValue::from_static(o.as_str()));
            resp
        }
        HopError::TimedOut => (StatusCode::GATEWAY_TIMEOUT, "timeout").into_response(),
        HopError::Malformed(m) => (StatusCode::BAD_REQUEST, m.clone()).into_response(),
        HopError::Failed(m) => (StatusCode::BAD_GATEWAY, m.clone()).into_response(),
    }
}

/// How a node reaches one downstream service.
#[derive(Clone, Debug)]
pub enum Peer {
    /// A gRPC service, plain tonic.
    Grpc(HopClient<Channel>),
    /// A gRPC service behind hopbudget's client layer.
    GrpcBudget(HopClient<GrpcClient<Channel>>),
    /// An HTTP service.
    Http {
        /// The client (with `BudgetMiddleware` when the mode has client layers).
        client: ClientWithMiddleware,
        /// `http://addr/call`.
        url: String,
        /// Whether `client` has `BudgetMiddleware`, which writes the trace context itself.
        layered: bool,
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

/// How `spec` reaches each service it calls, at `addrs` (aligned with `topo.services`),
/// through hopbudget's client layers when `budget_layers` is set.
pub fn peers_for(
    topo: &Topology,
    spec: &ServiceSpec,
    budget_layers: bool,
    profile: &SharedProfile,
    addrs: &[SocketAddr],
    http: &reqwest::Client,
) -> Result<Vec<(usize, Peer)>, String> {
    let mut builder = reqwest_middleware::ClientBuilder::new(http.clone());
    if budget_layers {
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
                if budget_layers {
                    Peer::GrpcBudget(HopClient::new(
                        ServiceBuilder::new()
                            .layer(GrpcClientLayer::new(profile.clone()))
                            .service(channel),
                    ))
                } else {
                    Peer::Grpc(HopClient::new(channel))
                }
            }
            Protocol::Http => Peer::Http {
                client: http.clone(),
                url: format!("http://{addr}{HTTP_PATH}"),
                layered: budget_layers,
            },
        };
        peers.push((idx, peer));
    }
    Ok(peers)
}

/// Serve `node` on `listener` until `stop` is cancelled, behind hopbudget's server layer when
/// its mode has one.
pub fn spawn_server(
    node: Arc<Node>,
    listener: TcpListener,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let layered = node.behaviour.layers().server;
    let profile = node.profile.clone();
    // Admission inside the server layer (the budget exists before the request queues), on a
    // leaf only: there the slot is the hop's own work, while a hop that calls others would
    // hold its slot through the calls below.
    let admission = layered && node.behaviour.admission() && node.peers.is_empty();
    match node.spec.protocol {
        Protocol::Grpc => {
            let svc = HopServer::new(GrpcNode(node));
            let incoming = accept_stream(listener);
            let mut builder = tonic::transport::Server::builder()
                .tcp_nodelay(true)
                .max_concurrent_streams(Some(100_000));
            let admission = admission
                .then(|| AdmissionLayer::grpc_from_profile(&profile.current()))
                .flatten();
            tokio::spawn(async move {
                let _ = if layered {
                    builder
                        .layer(GrpcServerLayer::new(profile))
                        .layer(tower::util::option_layer(admission))
                        .add_service(svc)
                        .serve_with_incoming_shutdown(incoming, stop.cancelled_owned())
                        .await
                } else {
                    builder
                        .add_service(svc)
                        .serve_with_incoming_shutdown(incoming, stop.cancelled_owned())
                        .await
                };
            })
        }
        Protocol::Http => {
            let mut app = axum::Router::new()
                .route(HTTP_PATH, axum::routing::post(services::http_call))
                .with_state(node);
            if layered {
                let admission = admission
                    .then(|| AdmissionLayer::from_profile(&profile.current()))
                    .flatten();
                app = app.layer(
                    ServiceBuilder::new()
                        .layer(ServerBudgetLayer::new(profile))
                        .option_layer(admission),
                );
            }
            // Small responses must not wait for a delayed ACK (Nagle): 40 ms stalls otherwise.
            let listener = listener.tap_io(|tcp| {
                let _ = tcp.set_nodelay(true);
            });
            tokio::spawn(async move {
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(stop.cancelled_owned())
                    .await;
            })
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

/// Hand background work over the queue (S11), with the headers the node's mode stamps.
pub fn hand_off(node: &Node, queue: &Producer, id: u64) {
    if node.spec.background.is_none() {
        return;
    }
    let headers = node.behaviour.background_headers(node);
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
