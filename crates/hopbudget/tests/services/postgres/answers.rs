//! A handler returns `pool.query(..).await?` and the caller gets a fitting answer (issue #33,
//! item 1), through a real tonic server and a real axum server over loopback, on the real
//! PostgreSQL: a budget outcome is the contract's answer (C3, C10), a database error is this
//! service's own failure (INTERNAL / 500, never 502), a database out of reach is UNAVAILABLE /
//! 503 without the refusal headers.
#![cfg(all(feature = "postgres", feature = "grpc", feature = "axum"))]

use std::time::Duration;

use crate::postgres_support::{available, ms, unreachable, url};
use axum::extract::{Path, State};
use hopbudget::postgres::{BudgetPool, QueryError};
use hopbudget::{HopPolicy, Outcome, RequestBudget};
use hopbudget_testkit::pb::hop_client::HopClient;
use hopbudget_testkit::pb::hop_server::{Hop, HopServer};
use hopbudget_testkit::pb::{CallReply, CallRequest};
use tonic::{Request, Response, Status};

/// The pools a case runs on: the real server, and one nothing listens behind.
#[derive(Clone)]
struct Pools {
    up: BudgetPool,
    down: BudgetPool,
}

impl Pools {
    fn new() -> Self {
        let up = BudgetPool::connect(&url(), 2).unwrap_or_else(|e| unreachable(e));
        // Port 1 on loopback: connecting is refused at once.
        let down = BudgetPool::connect("postgres://postgres@127.0.0.1:1/test", 1).unwrap();
        Self { up, down }
    }

    /// What a handler does for `case`: the query's error, as the handler would `?` it.
    async fn run(&self, case: &str) -> Result<String, QueryError> {
        let budget = RequestBudget::local(ms(2_000), HopPolicy::DEFAULT);
        let (pool, cost, sql) = match case {
            "divide" => (&self.up, ms(1), "SELECT 1 / 0"),
            "refuse" => (&self.up, Duration::from_secs(10), "SELECT 1"),
            "expire" => (&self.up, ms(1), "SELECT pg_sleep(5)"),
            "down" => (&self.down, ms(1), "SELECT 1"),
            _ => (&self.up, ms(1), "SELECT 1"),
        };
        pool.query(&budget, cost, sql, &[]).await?;
        Ok("ok".into())
    }
}

#[tonic::async_trait]
impl Hop for Pools {
    type WatchStream = futures_util::stream::Empty<Result<CallReply, Status>>;

    async fn watch(&self, _: Request<CallRequest>) -> Result<Response<Self::WatchStream>, Status> {
        Err(Status::unimplemented("not in this test"))
    }

    async fn call(&self, request: Request<CallRequest>) -> Result<Response<CallReply>, Status> {
        let tag = self.run(&request.into_inner().tag).await?;
        Ok(Response::new(CallReply {
            tag,
            ..CallReply::default()
        }))
    }
}

async fn grpc_server(pools: Pools) -> HopClient<tonic::transport::Channel> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(HopServer::new(pools))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    HopClient::new(channel)
}

async fn http_server(pools: Pools) -> String {
    async fn handler(
        State(pools): State<Pools>,
        Path(case): Path<String>,
    ) -> Result<String, QueryError> {
        pools.run(&case).await
    }
    let app = axum::Router::new()
        .route("/q/{case}", axum::routing::get(handler))
        .with_state(pools);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/q")
}

#[tokio::test]
async fn a_query_error_is_a_fitting_grpc_status() {
    if !available().await {
        return;
    }
    let mut client = grpc_server(Pools::new()).await;
    let mut call = async |case: &str| {
        let req = CallRequest {
            tag: case.into(),
            ..CallRequest::default()
        };
        client.call(req).await
    };
    assert_eq!(call("fine").await.unwrap().into_inner().tag, "ok");

    let status = call("divide").await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
    assert_eq!(status.message(), "database error (SQLSTATE 22012)");
    assert_eq!(hopbudget::grpc::outcome(&status), None);

    let status = call("refuse").await.unwrap_err();
    assert_eq!(
        hopbudget::grpc::outcome(&status),
        Some(Outcome::Refused),
        "{status:?}"
    );
    let refused = hopbudget::grpc::refusal(&status).expect("the refusal's figures");
    assert_eq!(refused.required(), Duration::from_secs(10));

    let status = call("expire").await.unwrap_err();
    assert_eq!(
        hopbudget::grpc::outcome(&status),
        Some(Outcome::Expired),
        "{status:?}"
    );

    let status = call("down").await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert_eq!(hopbudget::grpc::outcome(&status), None);
}

#[tokio::test]
async fn a_query_error_is_a_fitting_http_answer() {
    if !available().await {
        return;
    }
    let base = http_server(Pools::new()).await;
    let client = reqwest::Client::new();
    let get = async |case: &str| client.get(format!("{base}/{case}")).send().await.unwrap();

    assert_eq!(get("fine").await.status(), 200);

    let res = get("divide").await;
    assert_eq!(res.status(), 500);
    assert!(res.headers().get("x-deadline-outcome").is_none());
    assert_eq!(
        res.text().await.unwrap(),
        "database error (SQLSTATE 22012)\n"
    );

    let res = get("refuse").await;
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers()["x-deadline-outcome"], "refused");
    assert_eq!(res.headers()["x-deadline-required-ms"], "10000");

    let res = get("expire").await;
    assert_eq!(res.status(), 504);
    assert_eq!(res.headers()["x-deadline-outcome"], "expired");

    // Out of reach: 503, but not a refusal (no marker, no Retry-After: 0).
    let res = get("down").await;
    assert_eq!(res.status(), 503);
    assert!(res.headers().get("x-deadline-outcome").is_none());
    assert!(res.headers().get("retry-after").is_none());
}
