//! A handler's own `BudgetError`, returned with `?`, is the hop's outcome in its metrics (C17):
//! `budget.admit(cost)?` counts as `refused` (and refused before work), a returned expiry as
//! `expired`, exactly as if the server layer had answered. Real axum server on loopback.
//!
//! The recorder is the binary's one process-wide recorder (`metrics_support::recorder()`); the
//! service name `tax-errors` is this test's alone in the binary.
#![cfg(all(feature = "axum", feature = "prometheus"))]

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use hopbudget::http::server::ServerBudgetLayer;
use hopbudget::{BudgetError, Profile, RequestBudget};

use crate::metrics_support::sample;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_returned_budget_error_is_the_hops_outcome() {
    let handle = crate::metrics_support::recorder();

    async fn tax(budget: RequestBudget) -> Result<&'static str, BudgetError> {
        budget.admit(Duration::from_millis(300))?;
        Ok("taxed")
    }
    async fn expire() -> Result<&'static str, BudgetError> {
        Err(BudgetError::Expired)
    }
    let app = Router::new()
        .route("/tax", get(tax))
        .route("/expire", get(expire))
        .layer(ServerBudgetLayer::new(
            Profile::default().with_service("tax-errors"),
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let http = reqwest::Client::new();
    for (path, budget_ms, status) in [
        ("/tax", "120", 503),
        ("/tax", "900", 200),
        ("/expire", "900", 504),
    ] {
        let res = http
            .get(format!("http://{addr}{path}"))
            .header("x-request-timeout-ms", budget_ms)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), status, "{path} with {budget_ms} ms");
    }

    let text = handle.render();
    let hops = |route: &str, outcome: &str| {
        sample(
            &text,
            "hopbudget_hops_total",
            &format!("service=\"tax-errors\",route=\"{route}\",outcome=\"{outcome}\""),
        )
    };
    assert_eq!(hops("/tax", "refused"), Some(1.0), "{text}");
    assert_eq!(hops("/tax", "completed"), Some(1.0), "{text}");
    assert_eq!(hops("/expire", "expired"), Some(1.0), "{text}");
    assert_eq!(hops("/expire", "completed"), None, "{text}");
    assert_eq!(
        sample(
            &text,
            "hopbudget_refused_before_work_total",
            "service=\"tax-errors\",route=\"/tax\""
        ),
        Some(1.0),
        "{text}"
    );
}
