//! Expiry over gRPC (C4, C7): DEADLINE_EXCEEDED at the hop whose budget ran out and at its
//! caller, never CANCELLED, and the hop's work stops.
#![cfg(feature = "grpc")]

use std::time::Duration;

use crate::grpc_support::*;
use hopbudget::{EndCause, Outcome, Profile};

#[tokio::test]
async fn the_hop_itself_answers_deadline_exceeded_not_cancelled() {
    // A raw HTTP/2 client has no timer of its own, so what comes back is the server's answer.
    let leaf = serve_profile("leaf", Profile::default()).await;
    let raw = raw_call(leaf.addr, &[("grpc-timeout", "200m")], &call(&[], 10_000)).await;
    assert_eq!(raw.http_status, 200);
    assert_eq!(raw.grpc_status.as_deref(), Some("4"), "{raw:?}");
    assert_eq!(raw.metadata["x-deadline-outcome"], "expired");
    assert!(raw.reply.is_none());
    // The leaf's spawned work was stopped by the expiry, and knows why.
    assert!(
        leaf.stats
            .wait_for(Duration::from_secs(1), |s| s.live() == 0)
            .await
    );
    assert_eq!(
        *leaf.stats.work_stopped.lock().unwrap(),
        [Some(EndCause::Expired)]
    );
    assert_eq!(
        leaf.stats
            .work_done
            .load(std::sync::atomic::Ordering::SeqCst),
        0
    );
}

#[tokio::test]
async fn expiry_below_is_deadline_exceeded_at_the_hop_and_at_its_caller() {
    // The leaf accepts at most 150 ms, so its own deadline (not mid's) is the one that runs
    // out, well before the 300 ms the client started with.
    let short = Profile::from_yaml("max_ms: 150\nedge_total_ms: 150\n", "slow.yaml").unwrap();
    let slow = serve_profile("slow", short).await;
    let mid = serve_profile("mid", Profile::default()).await;
    let mut client = grpc_client(&Profile::default(), &mid.url());

    let status = budget(300)
        .scope(client.call(call(&[&slow.url()], 10_000)))
        .await
        .expect_err("the leaf cannot finish");
    // At the caller (this test) ...
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    assert_eq!(hopbudget::grpc::outcome(&status), Some(Outcome::Expired));
    // ... and at the hop in between, which got it from below.
    assert_eq!(
        *mid.stats.downstream_codes.lock().unwrap(),
        [tonic::Code::DeadlineExceeded]
    );
    assert!(
        slow.stats
            .wait_for(Duration::from_secs(1), |s| s.live() == 0)
            .await
    );
    assert_eq!(
        *slow.stats.work_stopped.lock().unwrap(),
        [Some(EndCause::Expired)]
    );
}

#[tokio::test]
async fn repeated_expiries_are_never_reported_as_cancelled() {
    // The server's answer, tonic's own client timer (which tonic calls CANCELLED) and the
    // layer's wait bound all fire within a millisecond of each other; whichever wins, the
    // caller sees DEADLINE_EXCEEDED.
    let slow = serve_profile("slow", Profile::default()).await;
    let mut client = grpc_client(&Profile::default(), &slow.url());
    for _ in 0..5 {
        let status = budget(150)
            .scope(client.call(call(&[], 10_000)))
            .await
            .expect_err("expires");
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    }
}

#[tokio::test]
async fn the_wait_is_bounded_when_the_downstream_ignores_its_deadline() {
    // A downstream with no hopbudget layer (a chain break, S13) that ignores its deadline.
    // tonic's own client timer fires at the stamped `grpc-timeout` and tonic would report
    // CANCELLED; the client layer reports it as expiry and the wait ends with the budget.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let _server = tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(hopbudget_testkit::pb::hop_server::HopServer::new(Sleeper))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await
    });
    let mut client = grpc_client(&Profile::default(), &format!("http://{addr}"));
    let b = budget(200);
    let status = b
        .scope(client.call(call(&[], 0)))
        .await
        .expect_err("bounded");
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    assert_eq!(hopbudget::grpc::outcome(&status), Some(Outcome::Expired));
    assert!(
        b.remaining() < Duration::from_millis(50),
        "ended near the deadline, not later"
    );
}

/// A handler that ignores deadlines entirely.
struct Sleeper;

#[tonic::async_trait]
impl hopbudget_testkit::pb::hop_server::Hop for Sleeper {
    type WatchStream = WatchStream;

    async fn watch(
        &self,
        _request: tonic::Request<hopbudget_testkit::pb::CallRequest>,
    ) -> Result<tonic::Response<WatchStream>, tonic::Status> {
        Err(tonic::Status::unimplemented("not here"))
    }

    async fn call(
        &self,
        _request: tonic::Request<hopbudget_testkit::pb::CallRequest>,
    ) -> Result<tonic::Response<hopbudget_testkit::pb::CallReply>, tonic::Status> {
        tokio::time::sleep(Duration::from_secs(10)).await;
        Ok(tonic::Response::new(Default::default()))
    }
}

#[tokio::test]
async fn without_the_layer_tonic_itself_answers_cancelled() {
    // The behaviour this crate fixes (tonic issues 2316 and 2220): a bare tonic server times
    // out at the client's `grpc-timeout` and calls it CANCELLED. Compare the first test above.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let _server = tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(hopbudget_testkit::pb::hop_server::HopServer::new(Sleeper))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await
    });
    let raw = raw_call(addr, &[("grpc-timeout", "100m")], &call(&[], 0)).await;
    assert_eq!(raw.grpc_status.as_deref(), Some("1"), "{raw:?}");
}

/// tonic's transport arms its own `grpc-timeout` timer outside every user layer and answers
/// CANCELLED when it fires. It creates that timer only after the layer's `call` returned, and
/// polls the layer first, so the layer's timer (fixed in `call`) is never the later of the
/// two: with no head start at all, the server's answer is DEADLINE_EXCEEDED every time.
#[tokio::test]
async fn the_server_answers_deadline_exceeded_at_the_deadline_every_time() {
    let leaf = serve_profile("leaf", Profile::default()).await;
    for i in 0..30 {
        // A raw HTTP/2 client has no timer of its own: what comes back is the server's.
        let raw = raw_call(leaf.addr, &[("grpc-timeout", "15m")], &call(&[], 10_000)).await;
        assert_eq!(raw.grpc_status.as_deref(), Some("4"), "call {i}: {raw:?}");
        assert_eq!(raw.metadata["x-deadline-outcome"], "expired", "call {i}");
    }
}
