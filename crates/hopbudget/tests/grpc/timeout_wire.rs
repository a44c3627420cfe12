//! `grpc-timeout` interop, end to end against a real tonic server (C9): each edge case that
//! `hopbudget::codec::grpc_timeout` decides, sent as raw bytes over HTTP/2 the way grpc-go,
//! grpc-java or grpcio would send it.
#![cfg(feature = "grpc")]

use std::time::Duration;

use crate::grpc_support::*;
use hopbudget::Profile;

async fn send(timeout: &str) -> (Raw, usize) {
    let leaf = serve_profile("leaf", Profile::default()).await;
    let raw = raw_call(leaf.addr, &[("grpc-timeout", timeout)], &call(&[], 0)).await;
    (raw, leaf.stats.entered())
}

fn assert_invalid_argument(raw: &Raw, entered: usize, reason: &str) {
    assert_eq!(raw.http_status, 200, "gRPC errors are HTTP 200: {raw:?}");
    assert_eq!(
        raw.grpc_status.as_deref(),
        Some("3"),
        "INVALID_ARGUMENT: {raw:?}"
    );
    let message = raw.grpc_message.as_deref().unwrap_or("");
    assert!(
        message.contains("`grpc-timeout`"),
        "names the header: {message}"
    );
    assert!(message.contains(reason), "says why ({reason}): {message}");
    // The contract's table: hopbudget's own answers name their outcome (C10, issue 32).
    assert_eq!(
        raw.metadata
            .get("x-deadline-outcome")
            .map(|v| v.to_str().unwrap()),
        Some("malformed"),
        "marked malformed: {raw:?}"
    );
    assert_eq!(entered, 0, "the handler never runs on a malformed deadline");
}

#[tokio::test]
async fn an_unknown_unit_is_invalid_argument_naming_the_header() {
    let (raw, entered) = send("10x").await;
    assert_invalid_argument(&raw, entered, "unknown unit 'x'");
}

#[tokio::test]
async fn units_are_case_sensitive() {
    // `s` is not seconds: only `S` is. grpc-go rejects it the same way.
    let (raw, entered) = send("10s").await;
    assert_invalid_argument(&raw, entered, "unknown unit 's'");
}

#[tokio::test]
async fn more_than_eight_digits_is_invalid_argument() {
    let (raw, entered) = send("123456789m").await;
    assert_invalid_argument(&raw, entered, "more than 8 digits");
}

#[tokio::test]
async fn a_missing_unit_is_invalid_argument() {
    let (raw, entered) = send("100").await;
    assert_invalid_argument(&raw, entered, "missing unit");
}

#[tokio::test]
async fn zero_is_already_expired_not_no_deadline() {
    for zero in ["0n", "0m", "0S", "0H"] {
        let (raw, entered) = send(zero).await;
        assert_eq!(raw.grpc_status.as_deref(), Some("4"), "{zero}: {raw:?}");
        assert_eq!(raw.metadata["x-deadline-outcome"], "expired", "{zero}");
        assert_eq!(entered, 0, "{zero}");
    }
}

#[tokio::test]
async fn overflowing_hours_are_clamped_to_the_profile_maximum() {
    // 99999999H is about 11 400 years: decoded exactly, then clamped to max_ms (30 s).
    let (raw, entered) = send("99999999H").await;
    assert_eq!(raw.grpc_status.as_deref(), Some("0"), "{raw:?}");
    assert_eq!(entered, 1);
    let seen = Duration::from_micros(raw.reply.unwrap().remaining_us[0]);
    assert!(
        seen <= Duration::from_secs(30) && seen > Duration::from_secs(29),
        "{seen:?}"
    );
}

#[tokio::test]
async fn every_unit_is_read() {
    for (value, at_most) in [
        ("2H", Duration::from_secs(30)), // clamped
        ("1M", Duration::from_secs(30)), // clamped
        ("5S", Duration::from_secs(5)),
        ("500m", Duration::from_millis(500)),
        ("400000u", Duration::from_millis(400)),
        ("99000000n", Duration::from_millis(99)),
    ] {
        let (raw, _) = send(value).await;
        let seen = Duration::from_micros(raw.reply.expect(value).remaining_us[0]);
        assert!(seen <= at_most && seen > at_most / 2, "{value}: {seen:?}");
    }
}

#[tokio::test]
async fn the_tightest_carrier_wins() {
    // A gRPC call behind Envoy carries both; the tighter one is the budget.
    let leaf = serve_profile("leaf", Profile::default()).await;
    let raw = raw_call(
        leaf.addr,
        &[
            ("grpc-timeout", "5S"),
            ("x-envoy-expected-rq-timeout-ms", "250"),
        ],
        &call(&[], 0),
    )
    .await;
    let reply = raw.reply.unwrap();
    assert_eq!(reply.source, ["envoy"]);
    assert!(reply.remaining_us[0] <= 250_000);
}

#[tokio::test]
async fn a_malformed_carrier_is_an_error_even_when_another_is_fine() {
    let leaf = serve_profile("leaf", Profile::default()).await;
    let raw = raw_call(
        leaf.addr,
        &[("grpc-timeout", "5S"), ("x-request-timeout-ms", "soon")],
        &call(&[], 0),
    )
    .await;
    assert_eq!(raw.grpc_status.as_deref(), Some("3"), "{raw:?}");
    assert!(raw.grpc_message.unwrap().contains("`x-request-timeout-ms`"));
    assert_eq!(leaf.stats.entered(), 0);
}
