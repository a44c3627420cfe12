//! Hedging through a real stack: `HedgeLayer` over `ClientBudgetLayer` on hyper-util's
//! `Client` (HTTP/2), calling an axum server behind `ServerBudgetLayer` on loopback whose
//! handler has a heavy tail: its first call never answers in time, the others answer at once.
//! The hedge answers; the server reads the budget each attempt arrived with (the hedge's is the
//! same budget, shrunk by the delay, never a fresh one) and how each attempt's budget ended
//! (the loser's stream was reset: cancelled, which the server counts as its caller going away,
//! never as an error or an expiry).
#![cfg(feature = "axum")]

use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use bytes::Bytes;
use hopbudget::hedge::{HedgeLayer, HedgeStats, idempotent_method};
use hopbudget::http::client::ClientBudgetLayer;
use hopbudget::http::server::ServerBudgetLayer;
use hopbudget::{Profile, RequestBudget};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use tower::{ServiceBuilder, ServiceExt};

use crate::hedge_support::Attempts;

async fn tail(State(seen): State<Attempts>, budget: RequestBudget) -> &'static str {
    if seen.arrived(&budget) == 0 {
        // The tail: far beyond the caller's budget.
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
    "answered"
}

#[tokio::test]
async fn the_hedge_answers_and_the_loser_arrives_cancelled() {
    let seen = Attempts::default();
    let app = Router::new()
        .route("/tail", get(tail))
        .with_state(seen.clone())
        .layer(ServerBudgetLayer::new(Profile::default()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let profile = Profile::default();
    let hedge = HedgeLayer::new(
        Duration::from_millis(100),
        2,
        idempotent_method::<Full<Bytes>>,
    );
    let client = ServiceBuilder::new()
        .layer(hedge.clone())
        .layer(ClientBudgetLayer::new(profile.clone()))
        .service(
            Client::builder(hyper_util::rt::TokioExecutor::new())
                .http2_only(true)
                .build_http::<Full<Bytes>>(),
        );
    let req = http::Request::get(format!("http://{addr}/tail"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let budget = RequestBudget::local(Duration::from_secs(2), profile.policy());
    let res = budget.scope(client.oneshot(req)).await.unwrap();
    assert_eq!(
        res.status(),
        200,
        "without the hedge the call would have expired"
    );
    assert_eq!(
        hedge.stats(),
        HedgeStats {
            calls: 1,
            hedges: 1,
            throttled: 0,
            hedge_wins: 1
        }
    );

    // The loser's stream was reset: its server-side budget ends as cancelled (C5), soon, not
    // at its deadline; the hedge carried the same budget, shrunk (C23).
    seen.assert_hedged_once_and_the_loser_cancelled().await;
}
