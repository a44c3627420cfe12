//! Hedging a unary gRPC call through a real stack: `ReplayLayer` (the body kept, so a hedge can
//! send it again), `HedgeLayer`, `GrpcClientLayer` and a tonic `Channel`, calling a tonic server
//! behind `GrpcServerLayer` on loopback whose first call never answers in time and whose
//! others answer at once. The hedge answers; the server reads the `grpc-timeout` each attempt
//! arrived with (the hedge's: the same budget less the delay) and how each attempt's budget
//! ended (the loser's stream was reset: CANCELLED, never an error or an expiry).
#![cfg(feature = "grpc")]

use std::time::Duration;

use hopbudget::grpc::client::{GrpcClientLayer, ReplayBody, ReplayLayer, into_tonic};
use hopbudget::hedge::{HedgeLayer, HedgeStats};
use hopbudget::{Profile, RequestBudget};
use hopbudget_testkit::pb::hop_client::HopClient;
use hopbudget_testkit::pb::{CallReply, CallRequest};
use tower::ServiceBuilder;

use crate::grpc_support::{WatchStream, budget};
use crate::hedge_support::Attempts;

struct TailOnce {
    seen: Attempts,
}

#[tonic::async_trait]
impl hopbudget_testkit::pb::hop_server::Hop for TailOnce {
    type WatchStream = WatchStream;
    async fn watch(
        &self,
        _: tonic::Request<CallRequest>,
    ) -> Result<tonic::Response<WatchStream>, tonic::Status> {
        Err(tonic::Status::unimplemented("watch"))
    }
    async fn call(
        &self,
        _: tonic::Request<CallRequest>,
    ) -> Result<tonic::Response<CallReply>, tonic::Status> {
        let budget = RequestBudget::current().expect("the server layer's budget");
        if self.seen.arrived(&budget) == 0 {
            // The tail: far beyond the caller's budget.
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        Ok(tonic::Response::new(CallReply::default()))
    }
}

#[tokio::test]
async fn a_hedged_grpc_call_answers_and_the_loser_arrives_cancelled() {
    let seen = Attempts::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let handler = TailOnce { seen: seen.clone() };
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .layer(hopbudget::grpc::server::GrpcServerLayer::new(
                Profile::default().with_service("tail"),
            ))
            .add_service(hopbudget_testkit::pb::hop_server::HopServer::new(handler))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await
            .unwrap();
    });

    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap();
    // Every gRPC call is a POST: idempotency is the method's, named by its path.
    let idempotent =
        |req: &http::Request<ReplayBody>| req.uri().path() == hopbudget_testkit::HOP_CALL_PATH;
    let hedge = HedgeLayer::new(Duration::from_millis(100), 2, idempotent);
    let mut client = HopClient::new(
        ServiceBuilder::new()
            .layer(ReplayLayer)
            .layer(hedge.clone())
            .layer(GrpcClientLayer::new(Profile::default()).destination(endpoint.uri()))
            .map_request(into_tonic)
            .service(endpoint.connect_lazy()),
    );
    budget(2_000)
        .scope(client.call(CallRequest::default()))
        .await
        .expect("the hedge answered; without it the call would have expired");
    assert_eq!(
        hedge.stats(),
        HedgeStats {
            calls: 1,
            hedges: 1,
            throttled: 0,
            hedge_wins: 1
        }
    );

    // The loser's stream was reset: CANCELLED at the server (C5); the hedge carried the same
    // budget, shrunk (C23).
    seen.assert_hedged_once_and_the_loser_cancelled().await;
}
