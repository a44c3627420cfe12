//! How a node reaches the services it calls: one [`Peer`] per call, with or without
//! hopbudget's client layers, a call sent through it, and the reply read back as a hop's
//! result.
//!
//! Replies are read back with the library's own helpers (`hopbudget::grpc::outcome` and
//! `refusal` for gRPC, `hopbudget::http::client::classify` for HTTP), never by matching
//! status text, so an expiry anywhere below is an expiry here too (C4).

use std::net::SocketAddr;
use std::time::Duration;

use axum::http::HeaderMap;
use hopbudget::grpc::client::{GrpcClient, GrpcClientLayer};
use hopbudget::http::reqwest::{BudgetMiddleware, budget_error};
use hopbudget::{BudgetError, Outcome, Refused, SharedProfile};
use reqwest_middleware::ClientWithMiddleware;
use tonic::transport::Channel;
use tower::ServiceBuilder;

use super::hop_error::HopError;
use super::topology::{Protocol, ServiceSpec, Topology};
use super::traces;
use super::wire::{HTTP_PATH, REQUEST_ID};
use crate::proto::hop_client::HopClient;
use crate::proto::{HopReply, HopRequest};

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
        Outcome::Refused => HopError::Budget(BudgetError::Refused(
            hopbudget::codec::marker::refusal(headers)
                .unwrap_or(Refused::new(Duration::ZERO, Duration::ZERO)),
        )),
        Outcome::Expired => HopError::Budget(BudgetError::Expired),
        Outcome::Cancelled => HopError::Budget(BudgetError::Cancelled),
        Outcome::Completed if status == 400 => HopError::Malformed(format!("HTTP status {status}")),
        Outcome::Completed => HopError::Failed(format!("HTTP status {status}")),
    }
}
