//! Runnable examples for hopbudget. The examples are the `[[example]]` targets of this crate;
//! this library only holds what several of them share: the `shop.Tax` gRPC service (compiled
//! from `proto/shop.proto` at build time with protox), its handler, and loopback servers.

use std::net::SocketAddr;
use std::time::Duration;

use hopbudget::grpc::client::{GrpcClient, GrpcClientLayer};
use hopbudget::grpc::server::GrpcServerLayer;
use hopbudget::{Profile, RequestBudget};
use tonic::transport::Channel;

/// Code generated from `proto/shop.proto`.
#[allow(
    missing_docs,
    unreachable_pub,
    clippy::all,
    missing_debug_implementations
)]
pub mod pb {
    tonic::include_proto!("shop");
}

use pb::tax_client::TaxClient;
use pb::tax_server::{Tax, TaxServer};
use pb::{QuoteReply, QuoteRequest};

/// The tax service: 8% of the price, after `work_ms` of work, reporting the budget it saw.
#[derive(Clone, Copy, Debug, Default)]
pub struct TaxService;

#[tonic::async_trait]
impl Tax for TaxService {
    async fn quote(
        &self,
        request: tonic::Request<QuoteRequest>,
    ) -> Result<tonic::Response<QuoteReply>, tonic::Status> {
        // GrpcServerLayer put the budget in the extensions (and in the task-local scope).
        let budget = request
            .extensions()
            .get::<RequestBudget>()
            .cloned()
            .ok_or_else(|| tonic::Status::internal("GrpcServerLayer is not installed"))?;
        let grpc_timeout = request
            .metadata()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let remaining_ms = budget.remaining().as_millis() as u64;
        let q = request.into_inner();
        // The "database": the server layer answers DEADLINE_EXCEEDED and drops this future
        // if the deadline passes first (C4, C7).
        tokio::time::sleep(Duration::from_millis(q.work_ms)).await;
        Ok(tonic::Response::new(QuoteReply {
            tax_cents: q.cents * 8 / 100,
            remaining_ms,
            grpc_timeout,
        }))
    }
}

/// Serve [`TaxService`] behind `GrpcServerLayer` on a fresh loopback port.
pub async fn serve_tax(profile: Profile) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(
        tonic::transport::Server::builder()
            .layer(GrpcServerLayer::new(profile))
            .add_service(TaxServer::new(TaxService))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    Ok(addr)
}

/// A `shop.Tax` client whose every call carries the current budget (`GrpcClientLayer`).
pub fn tax_client(profile: Profile, addr: SocketAddr) -> TaxClient<GrpcClient<Channel>> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("a socket address is a valid URI")
        .connect_lazy();
    TaxClient::new(
        tower::ServiceBuilder::new()
            .layer(GrpcClientLayer::new(profile))
            .service(channel),
    )
}

/// Serve an axum router on a fresh loopback port.
pub async fn serve_http(router: axum::Router) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok(addr)
}
