//! Hedging through a real stack: `HedgeLayer` over `ClientBudgetLayer` on hyper-util's
//! `Client` (HTTP/2), calling an axum server behind `ServerBudgetLayer` on loopback whose
//! handler has a heavy tail: its first call never answers in time, the others answer at once.
//! The hedge answers; the server reads the budget each attempt arrived with (the hedge's is the
//! same budget, shrunk by the delay, never a fresh one) and how each attempt's budget ended
//! (the loser's stream was reset: cancelled, which the server counts as its caller going away,
//! never as an error or an expiry).
#![cfg(feature = "axum")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use bytes::Bytes;
use hopbudget::hedge::{HedgeLayer, HedgeStats, idempotent_method};
use hopbudget::http::client::ClientBudgetLayer;
use hopbudget::http::server::ServerBudgetLayer;
use hopbudget::{EndCause, Profile, RequestBudget};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use tower::{ServiceBuilder, ServiceExt};

/// Per attempt, in arrival order: the budget it arrived with, and how that budget ended.
type Attempts = Arc<Mutex<Vec<(Duration, Option<EndCause>)>>>;

async fn tail(State(seen): State<Attempts>, budget: RequestBudget) -> &'static str {
    let n = {
        let mut seen = seen.lock().unwrap();
        seen.push((budget.at_arrival(), None));
        seen.len() - 1
    };
    // Record how this attempt's budget ends, whoever ends it.
    let watch = budget.clone();
    let record = seen.clone();
    tokio::spawn(async move {
        let cause = watch.done().await;
        record.lock().unwrap()[n].1 = Some(cause);
    });
    if n == 0 {
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
    // at its deadline.
    let mut loser = None;
    for _ in 0..200 {
        loser = seen.lock().unwrap()[0].1;
        if loser.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        loser,
        Some(EndCause::Cancelled),
        "the loser arrives cancelled"
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    let (first, hedged) = (seen[0].0, seen[1].0);
    // The same budget, shrunk by at least the 100 ms delay; a fresh one would be ~2 s again.
    assert!(
        hedged + Duration::from_millis(90) < first,
        "first arrived with {first:?}, the hedge with {hedged:?}"
    );
    assert!(first < Duration::from_secs(2) && !hedged.is_zero());
}
