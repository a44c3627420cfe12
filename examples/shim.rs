//! Protocol shims: HTTP in, gRPC in the middle, HTTP out, one budget end to end (C11).
//!
//! Run: `cargo run -p hopbudget-examples --example shim`
//!
//! ```text
//! client --HTTP--> checkout (axum) --gRPC--> tax (tonic) --HTTP--> rates (axum)
//! ```
//!
//! Neither shim has a line of deadline code: the server layer of one protocol installs the
//! budget, the client layer of the other forwards it, and a failure crosses back with `?`
//! through `DownstreamError`, keeping its meaning (an expiry stays an expiry: 504 ->
//! DEADLINE_EXCEEDED -> 504, C4, C10). Each hop prints the budget it arrived with.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::{Query, State};
use axum::routing::get;
use hopbudget::grpc::client::GrpcClient;
use hopbudget::grpc::server::GrpcServerLayer;
use hopbudget::http::reqwest::BudgetMiddleware;
use hopbudget::http::server::ServerBudgetLayer;
use hopbudget::{DownstreamError, Profile, RequestBudget};
use hopbudget_examples::pb::tax_client::TaxClient;
use hopbudget_examples::pb::tax_server::{Tax, TaxServer};
use hopbudget_examples::pb::{QuoteReply, QuoteRequest};
use hopbudget_examples::{serve_http, tax_client};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use tonic::transport::Channel;

/// rates (HTTP): the tax rate, after `work_ms` of work.
async fn rates(budget: RequestBudget, Query(q): Query<HashMap<String, u64>>) -> &'static str {
    println!(
        "  rates    arrived with {:>3} ms",
        budget.remaining().as_millis()
    );
    tokio::time::sleep(Duration::from_millis(
        q.get("work_ms").copied().unwrap_or(5),
    ))
    .await;
    "8"
}

/// tax (gRPC): asks rates over HTTP. The gRPC-to-HTTP shim.
struct TaxViaRates {
    http: ClientWithMiddleware,
    rates: SocketAddr,
}

#[tonic::async_trait]
impl Tax for TaxViaRates {
    async fn quote(
        &self,
        request: tonic::Request<QuoteRequest>,
    ) -> Result<tonic::Response<QuoteReply>, tonic::Status> {
        let budget = RequestBudget::current().expect("GrpcServerLayer installs the budget");
        println!(
            "  tax      arrived with {:>3} ms",
            budget.remaining().as_millis()
        );
        let q = request.into_inner();
        // The whole shim: the middleware forwards the ambient gRPC budget, and `?` turns a
        // deadline outcome from below into the matching gRPC status.
        let rate: u64 = self
            .http
            .get(format!("http://{}/rate?work_ms={}", self.rates, q.work_ms))
            .send()
            .await
            .map_err(DownstreamError::from)?
            .text()
            .await
            .map_err(DownstreamError::from)?
            .parse()
            .map_err(|_| tonic::Status::internal("rates answered a non-number"))?;
        Ok(tonic::Response::new(QuoteReply {
            tax_cents: q.cents * rate / 100,
            remaining_ms: budget.remaining().as_millis() as u64,
            grpc_timeout: String::new(),
        }))
    }
}

/// checkout (HTTP): asks tax over gRPC. The HTTP-to-gRPC shim.
async fn checkout(
    State(tax): State<TaxClient<GrpcClient<Channel>>>,
    budget: RequestBudget,
    Query(q): Query<HashMap<String, u64>>,
) -> Result<String, DownstreamError> {
    println!(
        "  checkout arrived with {:>3} ms",
        budget.remaining().as_millis()
    );
    let request = QuoteRequest {
        item: "book".into(),
        cents: 2_500,
        work_ms: q.get("work_ms").copied().unwrap_or(5),
    };
    // The whole shim: GrpcClientLayer forwards the ambient HTTP budget as grpc-timeout, and
    // `?` answers a deadline status as the matching HTTP answer (504, 503, 499).
    let reply = tax.clone().quote(request).await?.into_inner();
    Ok(format!("tax {} cents", reply.tax_cents))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let profile = Profile::default();

    let rates_addr = serve_http(Router::new().route("/rate", get(rates)).layer(
        ServerBudgetLayer::new(profile.clone().with_service("rates")),
    ))
    .await?;

    let tax = TaxViaRates {
        http: ClientBuilder::new(reqwest::Client::new())
            .with(BudgetMiddleware::new(profile.clone()))
            .build(),
        rates: rates_addr,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let tax_addr = listener.local_addr()?;
    tokio::spawn(
        tonic::transport::Server::builder()
            .layer(GrpcServerLayer::new(profile.clone().with_service("tax")))
            .add_service(TaxServer::new(tax))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );

    let checkout_addr = serve_http(
        Router::new()
            .route("/checkout", get(checkout))
            .with_state(tax_client(profile.clone(), tax_addr))
            .layer(ServerBudgetLayer::new(
                profile.clone().with_service("checkout"),
            )),
    )
    .await?;

    let client = reqwest::Client::new();
    for (budget_ms, work_ms, what) in [
        (300, 5, "rates answers at once"),
        (300, 2_000, "rates works 2 s: its budget runs out first"),
    ] {
        println!("client: {budget_ms} ms budget, {what}");
        let res = client
            .get(format!("http://{checkout_addr}/checkout?work_ms={work_ms}"))
            .header("x-request-timeout-ms", budget_ms.to_string())
            .send()
            .await?;
        let status = res.status();
        println!("client <- {status}: {}\n", res.text().await?.trim());
    }
    Ok(())
}
