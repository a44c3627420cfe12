//! Refuse before start over gRPC (C3): S2 with real tonic servers, and the client layer's
//! local refusal that sends nothing.
#![cfg(feature = "grpc")]

use std::time::Duration;

use crate::grpc_support::*;
use hopbudget::{Outcome, Profile};
use hopbudget_testkit::HOP_CALL_PATH;

fn tax_profile() -> Profile {
    Profile::from_yaml(
        &format!("service: tax\nroutes:\n  - path: {HOP_CALL_PATH}\n    min_budget_ms: 200\n"),
        "tax.yaml",
    )
    .unwrap()
}

#[tokio::test]
async fn s2_tax_refuses_before_its_handler_and_the_chain_fails_with_one_cause() {
    // S2: pricing calls tax with about 120 ms left; tax needs 200 ms.
    let tax = serve(HopHandler::new(tax_profile())).await;
    let pricing = serve_profile("pricing", Profile::default()).await;
    let mut client = grpc_client(&Profile::default(), &pricing.url());

    let status = budget(120)
        .scope(client.call(call(&[&tax.url()], 0)))
        .await
        .expect_err("tax refuses");

    assert_eq!(
        tax.stats.entered(),
        0,
        "tax's handler (the database) never ran"
    );
    assert_eq!(pricing.stats.entered(), 1);
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
    assert_eq!(
        hopbudget::grpc::outcome(&status),
        Some(Outcome::Refused),
        "{status:?}"
    );
    let refused = hopbudget::grpc::refusal(&status).expect("required and remaining stated");
    assert_eq!(refused.required(), Duration::from_millis(200));
    assert!(
        refused.remaining() < Duration::from_millis(120),
        "{refused:?}"
    );
    assert!(
        status.message().contains("needs 200 ms"),
        "{}",
        status.message()
    );
    assert_eq!(
        *pricing.stats.downstream_codes.lock().unwrap(),
        [tonic::Code::DeadlineExceeded]
    );
}

#[tokio::test]
async fn enough_budget_passes_the_same_threshold() {
    let tax = serve(HopHandler::new(tax_profile())).await;
    let mut client = grpc_client(&Profile::default(), &tax.url());
    let reply = budget(400).scope(client.call(call(&[], 0))).await.unwrap();
    assert_eq!(reply.into_inner().remaining_us.len(), 1);
    assert_eq!(tax.stats.entered(), 1);
}

#[tokio::test]
async fn the_client_layer_refuses_locally_and_sends_nothing() {
    // A listener that counts connections: nothing may arrive for a refused call.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let mut client = grpc_client(&Profile::default(), &url);

    // 12 ms left: 6 ms would be forwarded, under the 10 ms threshold.
    let status = budget(12)
        .scope(client.call(call(&[], 0)))
        .await
        .expect_err("refused locally");
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
    assert_eq!(hopbudget::grpc::outcome(&status), Some(Outcome::Refused));
    let refused = hopbudget::grpc::refusal(&status).unwrap();
    assert_eq!(refused.required(), Duration::from_millis(10));

    let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
    assert!(accepted.is_err(), "a refused call opened a connection");
}

#[tokio::test]
async fn a_zero_budget_is_expired_not_refused() {
    // C9: `0m` is already expired; the handler does not run.
    let leaf = serve_profile("leaf", Profile::default()).await;
    let raw = raw_call(leaf.addr, &[("grpc-timeout", "0m")], &call(&[], 0)).await;
    assert_eq!(raw.grpc_status.as_deref(), Some("4"), "{raw:?}");
    assert_eq!(raw.metadata["x-deadline-outcome"], "expired");
    assert_eq!(leaf.stats.entered(), 0);
}
