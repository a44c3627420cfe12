//! A handler's own `BudgetError` is an HTTP answer that an upstream hopbudget client reads back
//! as the same outcome (C3, C4, C10, C17): `budget.admit(cost)?` in an axum handler refuses
//! exactly as the server layer would, and reqwest's error gives the outcome to
//! `BudgetError::find`. Real axum server and reqwest client on loopback.
#![cfg(all(feature = "axum", feature = "reqwest"))]

use std::time::Duration;

use crate::http_support::{client, serve};
use axum::Router;
use axum::routing::get;
use hopbudget::{BudgetError, Profile, RequestBudget};

async fn app() -> String {
    async fn tax(budget: RequestBudget) -> Result<&'static str, BudgetError> {
        // The database query needs 300 ms: refuse before touching it (S2).
        budget.admit(Duration::from_millis(300))?;
        Ok("taxed")
    }
    async fn expire() -> Result<&'static str, BudgetError> {
        Err(BudgetError::Expired)
    }
    serve(
        Router::new()
            .route("/tax", get(tax))
            .route("/expire", get(expire))
            .layer(hopbudget::http::server::ServerBudgetLayer::new(
                Profile::default().with_service("tax"),
            )),
    )
    .await
}

#[tokio::test]
async fn a_handler_refusal_reaches_the_caller_as_a_refusal() {
    let url = app().await;
    let profile = Profile::default();

    // Plain reqwest sees the wire spelling.
    let res = reqwest::Client::new()
        .get(format!("{url}/tax"))
        .header("x-request-timeout-ms", "120")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers()["retry-after"], "0");
    assert_eq!(res.headers()["x-deadline-outcome"], "refused");
    assert_eq!(res.headers()["x-deadline-required-ms"], "300");

    // A hopbudget client reads it back as the refusal, through `BudgetError::find`.
    let err = RequestBudget::local(Duration::from_millis(150), profile.policy())
        .scope(client(&profile).get(format!("{url}/tax")).send())
        .await
        .expect_err("refused");
    match BudgetError::find(&err) {
        Some(BudgetError::Refused(r)) => {
            assert_eq!(r.required(), Duration::from_millis(300));
            assert!(r.remaining() < Duration::from_millis(150), "{r}");
        }
        other => panic!("expected a refusal, got {other:?} from {err:?}"),
    }

    // With enough budget the handler answers.
    let ok = RequestBudget::local(Duration::from_secs(2), profile.policy())
        .scope(client(&profile).get(format!("{url}/tax")).send())
        .await
        .unwrap();
    assert_eq!(ok.text().await.unwrap(), "taxed");
}

#[tokio::test]
async fn a_handler_expiry_is_expiry_at_the_caller() {
    let url = app().await;
    let profile = Profile::default();
    let err = client(&profile)
        .get(format!("{url}/expire"))
        .send()
        .await
        .expect_err("expired");
    assert_eq!(
        BudgetError::find(&err),
        Some(&BudgetError::Expired),
        "{err:?}"
    );
}
