//! The retry policy (C6) through a real client: `DeadlineRetry` with `BudgetErrors` around
//! `ClientBudgetLayer` on hyper-util's `Client`, calling a real axum server behind
//! `ServerBudgetLayer` on loopback. A refusal whose requirement the caller's forward budget
//! covers is tried again; an expiry, and a refusal it cannot cover, are not. The server
//! counts the attempts it received.
#![cfg(feature = "axum")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use bytes::Bytes;
use hopbudget::http::client::ClientBudgetLayer;
use hopbudget::http::server::ServerBudgetLayer;
use hopbudget::retry::{BudgetErrors, DeadlineRetry};
use hopbudget::{BudgetError, Profile, Refused, RequestBudget};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use tower::{ServiceBuilder, ServiceExt};

/// Attempts per route.
#[derive(Clone, Default)]
struct Seen {
    first_refused: Arc<AtomicUsize>,
    always_expired: Arc<AtomicUsize>,
    needs_more: Arc<AtomicUsize>,
}

async fn serve() -> (String, Seen) {
    let seen = Seen::default();
    // The first attempt is refused (another replica may have room); the next one works.
    async fn first_refused(State(seen): State<Seen>) -> Result<&'static str, BudgetError> {
        if seen.first_refused.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(
                Refused::new(Duration::from_millis(200), Duration::from_millis(150)).into(),
            );
        }
        Ok("taxed")
    }
    async fn always_expired(State(seen): State<Seen>) -> Result<&'static str, BudgetError> {
        seen.always_expired.fetch_add(1, Ordering::SeqCst);
        Err(BudgetError::Expired)
    }
    // Needs 5 s: no caller with less can be helped by a retry.
    async fn needs_more(State(seen): State<Seen>) -> Result<&'static str, BudgetError> {
        seen.needs_more.fetch_add(1, Ordering::SeqCst);
        Err(Refused::new(Duration::from_secs(5), Duration::from_millis(900)).into())
    }
    let app = Router::new()
        .route("/first-refused", get(first_refused))
        .route("/always-expired", get(always_expired))
        .route("/needs-more", get(needs_more))
        .with_state(seen.clone())
        .layer(ServerBudgetLayer::new(Profile::default()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), seen)
}

/// One call through retry -> budget layer -> hyper-util client, under a 1 s budget; the
/// result's deadline outcome (`None` for a 2xx).
async fn call(base: &str, path: &str) -> Result<u16, Option<BudgetError>> {
    let profile = Profile::default();
    let client = ServiceBuilder::new()
        .retry(DeadlineRetry::new(BudgetErrors, 2))
        .layer(ClientBudgetLayer::new(profile.clone()))
        .service(Client::builder(hyper_util::rt::TokioExecutor::new()).build_http::<Full<Bytes>>());
    let req = http::Request::get(format!("{base}{path}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let budget = RequestBudget::local(Duration::from_secs(1), profile.policy());
    match budget.scope(client.oneshot(req)).await {
        Ok(res) => Ok(res.status().as_u16()),
        Err(e) => Err(BudgetError::find(e.as_ref()).cloned()),
    }
}

#[tokio::test]
async fn a_covered_refusal_is_retried_and_an_expiry_is_not() {
    let (base, seen) = serve().await;

    assert_eq!(call(&base, "/first-refused").await, Ok(200));
    assert_eq!(
        seen.first_refused.load(Ordering::SeqCst),
        2,
        "refused, then retried"
    );

    assert_eq!(
        call(&base, "/always-expired").await,
        Err(Some(BudgetError::Expired))
    );
    assert_eq!(
        seen.always_expired.load(Ordering::SeqCst),
        1,
        "an expiry is never retried (C6)"
    );

    let refused = call(&base, "/needs-more").await;
    assert!(
        matches!(refused, Err(Some(BudgetError::Refused(ref r))) if r.required() == Duration::from_secs(5)),
        "{refused:?}"
    );
    assert_eq!(
        seen.needs_more.load(Ordering::SeqCst),
        1,
        "a refusal the forward budget cannot cover is not retried"
    );
}
