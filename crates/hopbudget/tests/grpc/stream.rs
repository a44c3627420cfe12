//! Server-streaming gRPC responses (C13, S12 over gRPC): on an ordinary route the request
//! deadline ends the stream with DEADLINE_EXCEEDED trailers; on a `mode: stream` route the
//! deadline covers the time to the first message only, then the stream lifetime applies.
#![cfg(feature = "grpc")]

use std::sync::atomic::Ordering;

use crate::grpc_support::*;
use hopbudget::Profile;
use hopbudget_testkit::HOP_WATCH_PATH;
use hopbudget_testkit::pb::CallRequest;

fn watch(count: u32, every_ms: u64) -> CallRequest {
    CallRequest {
        work_ms: every_ms,
        count,
        ..Default::default()
    }
}

fn stream_profile(extra: &str) -> Profile {
    Profile::from_yaml(
        &format!("routes:\n  - path: {HOP_WATCH_PATH}\n    mode: stream\n{extra}"),
        "stream.yaml",
    )
    .unwrap()
}

#[tokio::test]
async fn the_request_deadline_ends_a_stream_on_an_ordinary_route() {
    let server = serve_profile("watch", Profile::default()).await;
    // 10 messages 100 ms apart against a 250 ms budget.
    let raw = raw_call_path(
        server.addr,
        HOP_WATCH_PATH,
        &[("grpc-timeout", "250m")],
        &watch(10, 100),
    )
    .await;
    assert_eq!(raw.http_status, 200);
    assert_eq!(raw.grpc_status.as_deref(), Some("4"), "{raw:?}");
    assert_eq!(raw.metadata["x-deadline-outcome"], "expired");
    assert!(raw.messages < 10, "the stream was cut off: {raw:?}");
    // The handler's stream was dropped, so it stops producing.
    let produced = server.stats.streamed.load(Ordering::SeqCst);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(server.stats.streamed.load(Ordering::SeqCst), produced);
}

#[tokio::test]
async fn a_stream_route_outlives_the_request_deadline_once_it_has_started() {
    // S12 over gRPC: the first message comes in time, so the stream runs to its end.
    let server = serve_profile("watch", stream_profile("")).await;
    let raw = raw_call_path(
        server.addr,
        HOP_WATCH_PATH,
        &[("grpc-timeout", "250m")],
        &watch(6, 100),
    )
    .await;
    assert_eq!(raw.grpc_status.as_deref(), Some("0"), "{raw:?}");
    assert_eq!(raw.messages, 6);
}

#[tokio::test]
async fn a_stream_route_still_needs_its_first_message_in_time() {
    let server = serve_profile("watch", stream_profile("")).await;
    let raw = raw_call_path(
        server.addr,
        HOP_WATCH_PATH,
        &[("grpc-timeout", "150m")],
        &watch(3, 400),
    )
    .await;
    assert_eq!(raw.grpc_status.as_deref(), Some("4"), "{raw:?}");
    assert_eq!(raw.messages, 0);
}

#[tokio::test]
async fn after_the_first_message_the_stream_lifetime_applies() {
    let server = serve_profile("watch", stream_profile("stream_lifetime_ms: 300\n")).await;
    // Starts in time, but 20 messages 100 ms apart outlast the 300 ms lifetime.
    let raw = raw_call_path(
        server.addr,
        HOP_WATCH_PATH,
        &[("grpc-timeout", "5S")],
        &watch(20, 100),
    )
    .await;
    assert_eq!(raw.grpc_status.as_deref(), Some("4"), "{raw:?}");
    assert!(raw.messages >= 1 && raw.messages < 20, "{raw:?}");
}
