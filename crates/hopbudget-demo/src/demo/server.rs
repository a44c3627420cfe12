//! A node as a real server: gRPC (tonic) or HTTP (axum) on its own port, behind hopbudget's
//! server layer (and, on a leaf, its admission layer) when the node's mode has them. Each
//! inbound request is handed to the mode ([`HopMode::admit`](super::node::HopMode::admit)) in
//! the hop's span.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::serve::ListenerExt;
use hopbudget::admission::AdmissionLayer;
use hopbudget::grpc::server::GrpcServerLayer;
use hopbudget::http::server::ServerBudgetLayer;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceBuilder;
use tracing::Instrument as _;

use super::answer;
use super::hop_error::HopError;
use super::node::Node;
use super::topology::{Protocol, ServiceSpec, Topology};
use super::traces;
use super::wire::{self, HTTP_PATH, REQUEST_ID};
use crate::proto::hop_server::{Hop, HopServer};
use crate::proto::{HopReply, HopRequest};

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
            let collector = node.collector.clone();
            let svc = HopServer::new(GrpcNode(node));
            let incoming = accept_stream(listener);
            let mut builder = tonic::transport::Server::builder()
                .tcp_nodelay(true)
                .max_concurrent_streams(Some(100_000));
            let admission = admission
                .then(|| AdmissionLayer::grpc_from_profile(&profile.current()))
                .flatten();
            if let Some(layer) = admission.clone() {
                collector.watch_queue(move || layer.waiting());
            }
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
                .route(HTTP_PATH, axum::routing::post(http_call))
                .with_state(node.clone());
            if layered {
                let admission = admission
                    .then(|| AdmissionLayer::from_profile(&profile.current()))
                    .flatten();
                if let Some(layer) = admission.clone() {
                    node.collector.watch_queue(move || layer.waiting());
                }
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

/// Serve one inbound request with its `headers`, in the hop's span: hopbudget's, opened by
/// the server layer around this handler, or the demo's own where the mode has no server
/// layer (see [`traces`]).
async fn handle(node: Arc<Node>, id: u64, headers: &HeaderMap) -> Result<u32, HopError> {
    if node.behaviour.layers().server {
        traces::annotate(&tracing::Span::current(), id, headers);
        return node.behaviour.admit(node.clone(), id).await;
    }
    let span = traces::own_span(&node.spec, wire::route_of(&node.spec), headers);
    traces::annotate(&span, id, headers);
    node.behaviour
        .admit(node.clone(), id)
        .instrument(span)
        .await
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
            Err(e) => Err(answer::grpc_status(&self.0.profile, &e)),
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
        Err(e) => answer::http_response(&node.profile, &e),
    }
}
