//! The gRPC client layer over real sockets: a streamed body is bounded by the budget, not
//! only the head (C4, C5); tonic's per-call `set_timeout` combines with the budget as the
//! tighter of the two (C16); a channel marked untrusted sends no `grpc-timeout` (C19, S16).
#![cfg(feature = "grpc")]

mod grpc_support;

use std::time::{Duration, Instant};

use grpc_support::*;
use hopbudget::grpc::client::GrpcClientLayer;
use hopbudget::{Profile, RequestBudget};
use hopbudget_testkit::HOP_WATCH_PATH;
use hopbudget_testkit::pb::CallRequest;
use hopbudget_testkit::pb::hop_client::HopClient;
use tonic::Code;
use tower::ServiceBuilder;

const LOOSE: Duration = Duration::from_secs(2);

/// A server whose `Watch` route is a stream route: after the first message it runs for the
/// stream lifetime, so only the client can end the stream at the caller's budget.
async fn streaming_server() -> Server {
    let profile = Profile::from_yaml(
        &format!("routes:\n  - path: {HOP_WATCH_PATH}\n    mode: stream\n"),
        "stream.yaml",
    )
    .unwrap();
    serve_profile("watch", profile).await
}

fn watch(count: u32, every_ms: u64) -> CallRequest {
    CallRequest {
        work_ms: every_ms,
        count,
        ..Default::default()
    }
}

#[tokio::test]
async fn a_trickled_stream_ends_at_the_budget_as_deadline_exceeded() {
    let server = streaming_server().await;
    let mut client = grpc_client(&Profile::default(), &server.url());
    let b = budget(300);
    let start = Instant::now();
    let result = b
        .scope(async {
            // 100 messages 100 ms apart: 10 s if nobody stops it.
            let mut stream = client.watch(watch(100, 100)).await?.into_inner();
            let mut got = 0;
            while stream.message().await?.is_some() {
                got += 1;
            }
            Ok::<_, tonic::Status>(got)
        })
        .await;
    let status = result.unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert_eq!(
        status.metadata().get("x-deadline-outcome").unwrap(),
        "expired"
    );
    assert!(start.elapsed() < LOOSE, "held for {:?}", start.elapsed());
}

#[tokio::test]
async fn a_trickled_stream_ends_as_cancelled_when_the_caller_goes_away() {
    let server = streaming_server().await;
    let mut client = grpc_client(&Profile::default(), &server.url());
    let b = RequestBudget::local(Duration::from_secs(5), Profile::default().policy());
    let canceller = b.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        canceller.cancel();
    });
    let start = Instant::now();
    let result = b
        .scope(async {
            let mut stream = client.watch(watch(100, 100)).await?.into_inner();
            while stream.message().await?.is_some() {}
            Ok::<_, tonic::Status>(())
        })
        .await;
    let status = result.unwrap_err();
    assert_eq!(status.code(), Code::Cancelled, "{status:?}");
    assert!(start.elapsed() < LOOSE, "held for {:?}", start.elapsed());
}

fn with_timeout(req: CallRequest, timeout: Duration) -> tonic::Request<CallRequest> {
    let mut req = tonic::Request::new(req);
    req.set_timeout(timeout);
    req
}

/// The `grpc-timeout` the server received, in milliseconds.
fn told_ms(raw: &str) -> u64 {
    let (digits, unit) = raw.split_at(raw.len() - 1);
    let n: u64 = digits.parse().unwrap();
    match unit {
        "n" => n / 1_000_000,
        "u" => n / 1_000,
        "m" => n,
        "S" => n * 1_000,
        other => panic!("unexpected unit {other} in {raw}"),
    }
}

#[tokio::test]
async fn a_shorter_set_timeout_wins_over_the_budget() {
    let server = serve_profile("leaf", Profile::default()).await;
    let mut client = grpc_client(&Profile::default(), &server.url());
    // What the callee is told.
    let reply = budget(5_000)
        .scope(client.call(with_timeout(call(&[], 0), Duration::from_millis(150))))
        .await
        .unwrap()
        .into_inner();
    let told = told_ms(&reply.grpc_timeout[0]);
    assert!(told <= 150, "the tighter value goes out, got {told} ms");
    // And the wait: 3 s of work against a 150 ms per-call timeout in a 5 s budget.
    let start = Instant::now();
    let status = budget(5_000)
        .scope(client.call(with_timeout(call(&[], 3_000), Duration::from_millis(150))))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn a_longer_set_timeout_never_extends_the_budget() {
    let server = serve_profile("leaf", Profile::default()).await;
    let mut client = grpc_client(&Profile::default(), &server.url());
    let reply = budget(300)
        .scope(client.call(with_timeout(call(&[], 0), Duration::from_secs(5))))
        .await
        .unwrap()
        .into_inner();
    let told = told_ms(&reply.grpc_timeout[0]);
    assert!(told <= 294, "the budget wins, got {told} ms");
    let start = Instant::now();
    let status = budget(300)
        .scope(client.call(with_timeout(call(&[], 3_000), Duration::from_secs(5))))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(start.elapsed() < LOOSE, "{:?}", start.elapsed());
}

#[tokio::test]
async fn s16_an_untrusted_channel_sends_no_grpc_timeout() {
    let server = serve_profile("third-party", Profile::default()).await;
    let channel = tonic::transport::Endpoint::from_shared(server.url())
        .unwrap()
        .connect_lazy();
    let mut untrusted = HopClient::new(
        ServiceBuilder::new()
            .layer(GrpcClientLayer::new(Profile::default()).untrusted())
            .service(channel),
    );
    let reply = budget(500)
        .scope(untrusted.call(with_timeout(call(&[], 0), Duration::from_millis(400))))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        reply.grpc_timeout[0], "",
        "no deadline header to a third party"
    );
    assert_eq!(reply.source[0], "fallback");
    // The same server through a trusted channel gets one.
    let mut trusted = grpc_client(&Profile::default(), &server.url());
    let reply = budget(500)
        .scope(trusted.call(call(&[], 0)))
        .await
        .unwrap()
        .into_inner();
    assert!(told_ms(&reply.grpc_timeout[0]) <= 494);
    // An untrusted call is still bounded by the budget.
    let start = Instant::now();
    let status = budget(300)
        .scope(untrusted.call(call(&[], 3_000)))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(start.elapsed() < LOOSE);
}
