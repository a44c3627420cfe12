//! Deadline-aware admission (C21) composed with the server layer in a real axum server over
//! loopback: `ServiceBuilder` with `ServerBudgetLayer` outside and `AdmissionLayer` inside.
//!
//! Real time and real sockets: the handlers are held and released by the test, so nothing
//! depends on speed; the one timed behaviour (a waiter refused at `deadline - cost`) is
//! checked by its answer, not by how long it took.
#![cfg(all(feature = "axum", feature = "reqwest"))]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::http_support::{eventually, profile, serve};
use axum::Router;
use axum::routing::get;
use hopbudget::admission::AdmissionLayer;
use hopbudget::http::server::ServerBudgetLayer;
use hopbudget::{Profile, RequestBudget};
use tokio::sync::Semaphore;
use tower::ServiceBuilder;

/// A service with one admission slot whose `/work` handler logs the budget it started with
/// and then waits until the test releases it.
struct Held {
    url: String,
    admission: AdmissionLayer,
    release: Arc<Semaphore>,
    started: Arc<Mutex<Vec<u64>>>,
}

async fn held_service(p: &Profile) -> Held {
    let admission = AdmissionLayer::from_profile(p).expect("the profile has an admission section");
    let release = Arc::new(Semaphore::new(0));
    let started = Arc::new(Mutex::new(Vec::new()));
    let router = Router::new()
        .route(
            "/work",
            get({
                let (release, started) = (release.clone(), started.clone());
                move |budget: RequestBudget| async move {
                    started
                        .lock()
                        .unwrap()
                        .push(budget.at_arrival().as_millis() as u64);
                    release.acquire().await.unwrap().forget();
                    "done"
                }
            }),
        )
        .layer(
            ServiceBuilder::new()
                .layer(ServerBudgetLayer::new(p.clone()))
                .layer(admission.clone()),
        );
    Held {
        url: serve(router).await,
        admission,
        release,
        started,
    }
}

fn call(url: &str, budget_ms: u64) -> tokio::task::JoinHandle<reqwest::Result<reqwest::Response>> {
    let req = reqwest::Client::new()
        .get(format!("{url}/work"))
        .header("x-request-timeout-ms", budget_ms.to_string());
    tokio::spawn(req.send())
}

const PROFILE: &str =
    "service: admission\nadmission:\n  limit: 1\n  routes:\n    - path: /work\n      cost_ms: 50\n";

#[tokio::test]
async fn a_waiter_whose_budget_cannot_cover_the_cost_is_refused_without_running() {
    let s = held_service(&profile(PROFILE)).await;
    let first = call(&s.url, 10_000);
    assert!(
        eventually(Duration::from_secs(5), || s.started.lock().unwrap().len()
            == 1)
        .await
    );

    // 300 ms of budget, 50 ms of cost: it waits, and at 250 ms is refused like the server
    // layer's own refusal, never entering the handler.
    let res = call(&s.url, 300).await.unwrap().unwrap();
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers()["retry-after"], "0");
    assert_eq!(res.headers()["x-deadline-outcome"], "refused");
    assert_eq!(res.headers()["x-deadline-required-ms"], "50");
    let remaining: u64 = res.headers()["x-deadline-remaining-ms"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        remaining <= 50,
        "refused once no more than the cost remained: {remaining}"
    );
    assert_eq!(
        s.started.lock().unwrap().len(),
        1,
        "the refused request never ran"
    );
    assert_eq!(s.admission.waiting(), 0);

    s.release.add_permits(1);
    assert_eq!(first.await.unwrap().unwrap().status(), 200);
    assert!(eventually(Duration::from_secs(5), || s.admission.available() == 1).await);
}

#[tokio::test]
async fn waiters_run_earliest_deadline_first_over_loopback() {
    let s = held_service(&profile(PROFILE)).await;
    let first = call(&s.url, 30_000);
    assert!(
        eventually(Duration::from_secs(5), || s.started.lock().unwrap().len()
            == 1)
        .await
    );
    let late = call(&s.url, 20_000);
    assert!(eventually(Duration::from_secs(5), || s.admission.waiting() == 1).await);
    let early = call(&s.url, 10_000);
    assert!(eventually(Duration::from_secs(5), || s.admission.waiting() == 2).await);

    s.release.add_permits(3);
    for t in [first, late, early] {
        assert_eq!(t.await.unwrap().unwrap().status(), 200);
    }
    let started = s.started.lock().unwrap().clone();
    assert_eq!(started.len(), 3);
    assert!(
        started[1] <= 10_000 && started[2] > 10_000,
        "the 10 s request ran before the 20 s one, which queued first: {started:?}"
    );
}

#[tokio::test]
async fn a_client_that_goes_away_leaves_the_queue_and_no_slot_leaks() {
    let s = held_service(&profile(PROFILE)).await;
    let first = call(&s.url, 30_000);
    assert!(
        eventually(Duration::from_secs(5), || s.started.lock().unwrap().len()
            == 1)
        .await
    );
    let gone = call(&s.url, 30_000);
    assert!(eventually(Duration::from_secs(5), || s.admission.waiting() == 1).await);
    gone.abort(); // the client closes its connection
    assert!(
        eventually(Duration::from_secs(5), || s.admission.waiting() == 0).await,
        "the abandoned waiter left the queue"
    );
    s.release.add_permits(1);
    assert_eq!(first.await.unwrap().unwrap().status(), 200);
    assert!(eventually(Duration::from_secs(5), || s.admission.available() == 1).await);
    assert_eq!(
        s.started.lock().unwrap().len(),
        1,
        "the abandoned request never ran"
    );

    // The slot is usable again.
    let again = call(&s.url, 5_000);
    assert!(
        eventually(Duration::from_secs(5), || s.started.lock().unwrap().len()
            == 2)
        .await
    );
    s.release.add_permits(1);
    assert_eq!(again.await.unwrap().unwrap().status(), 200);
}
