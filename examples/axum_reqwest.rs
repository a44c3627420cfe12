//! An axum front calling an axum service with reqwest: one budget across both hops.
//!
//! Run: `cargo run -p hopbudget-examples --example axum_reqwest`
//!
//! `checkout` (axum, behind `ServerBudgetLayer`) calls `tax` (axum, behind
//! `ServerBudgetLayer`) through reqwest with `BudgetMiddleware`. Neither handler passes a
//! budget or a timeout by hand: the middleware forwards the ambient budget minus the hop
//! margin and transit allowance (C2), `budget.admit(cost)?` refuses work that cannot finish
//! (C3), and a failure below is handed on with `?` keeping its meaning (C4, C10). It prints
//! what each hop saw for three requests: one with time to spare, one too short for tax's
//! database (refused before start), one whose tax work outlasts the budget (expired).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::{Query, State};
use axum::routing::get;
use hopbudget::http::reqwest::BudgetMiddleware;
use hopbudget::http::server::ServerBudgetLayer;
use hopbudget::{BudgetError, DownstreamError, Profile, RequestBudget};
use hopbudget_examples::serve_http;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};

/// tax: needs 200 ms for its database query; reports the budget it arrived with.
async fn tax(
    budget: RequestBudget,
    headers: axum::http::HeaderMap,
    Query(q): Query<HashMap<String, u64>>,
) -> Result<String, BudgetError> {
    let seen = budget.remaining().as_millis();
    // Refuse before touching the database (S2); the `?` answers 503 + Retry-After: 0 with
    // the required and remaining milliseconds, as the server layer itself would.
    budget.admit(Duration::from_millis(200))?;
    tokio::time::sleep(Duration::from_millis(
        q.get("work_ms").copied().unwrap_or(20),
    ))
    .await;
    let header = headers
        .get("x-request-timeout-ms")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-");
    Ok(format!(
        "tax saw {seen} ms (x-request-timeout-ms: {header})"
    ))
}

/// checkout: calls tax; the middleware finds the ambient budget by itself.
async fn checkout(
    State((http, tax)): State<(ClientWithMiddleware, SocketAddr)>,
    budget: RequestBudget,
    Query(q): Query<HashMap<String, u64>>,
) -> Result<String, DownstreamError> {
    let seen = budget.remaining().as_millis();
    let work = q.get("work_ms").copied().unwrap_or(20);
    let answer = http
        .get(format!("http://{tax}/tax?work_ms={work}"))
        .send()
        .await?
        .text()
        .await?;
    Ok(format!("checkout saw {seen} ms; {answer}"))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let profile = Profile::default(); // profiles/default.yaml: 5 ms margin, 1 ms transit
    let tax_addr = serve_http(
        Router::new()
            .route("/tax", get(tax))
            .layer(ServerBudgetLayer::new(profile.clone().with_service("tax"))),
    )
    .await?;
    let http = ClientBuilder::new(reqwest::Client::new())
        .with(BudgetMiddleware::new(profile.clone()))
        .build();
    let checkout_addr = serve_http(
        Router::new()
            .route("/checkout", get(checkout))
            .with_state((http, tax_addr))
            .layer(ServerBudgetLayer::new(
                profile.clone().with_service("checkout"),
            )),
    )
    .await?;

    // The user's client sends its budget as a header, like any non-Rust caller would.
    let plain = reqwest::Client::new();
    for (budget_ms, work_ms, what) in [
        (500, 20, "time to spare"),
        (
            150,
            20,
            "too short for tax's 200 ms query: refused before start",
        ),
        (300, 1000, "tax works 1 s: expired"),
    ] {
        let res = plain
            .get(format!("http://{checkout_addr}/checkout?work_ms={work_ms}"))
            .header("x-request-timeout-ms", budget_ms.to_string())
            .send()
            .await?;
        let status = res.status();
        let outcome = res
            .headers()
            .get("x-deadline-outcome")
            .map(|v| format!(" [x-deadline-outcome: {}]", v.to_str().unwrap_or("?")))
            .unwrap_or_default();
        let body = res.text().await?;
        println!(
            "budget {budget_ms} ms, {what}\n  -> {status}{outcome}: {}",
            body.trim()
        );
    }

    // A hopbudget client on the same call: the outcome is a `BudgetError`, found in the
    // reqwest error by `BudgetError::find`.
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(BudgetMiddleware::new(profile.clone()))
        .build();
    let edge = RequestBudget::local(Duration::from_millis(150), profile.policy());
    let err = edge
        .scope(
            client
                .get(format!("http://{checkout_addr}/checkout"))
                .send(),
        )
        .await
        .expect_err("150 ms is too short for tax");
    match BudgetError::find(&err) {
        Some(BudgetError::Refused(r)) => println!(
            "hopbudget client, 150 ms: refused, tax needs {} ms and got {} ms",
            r.required().as_millis(),
            r.remaining().as_millis()
        ),
        other => println!("hopbudget client, 150 ms: {other:?} ({err})"),
    }
    Ok(())
}
