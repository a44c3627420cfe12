//! Cancellation over gRPC (C5, C7): when the caller drops the call, the hop records
//! `cancelled`, cancels its tree, and the downstream handler's work stops. No orphans.
#![cfg(feature = "grpc")]

use std::time::Duration;

use crate::grpc_support::*;
use hopbudget::{EndCause, Profile};

/// Poll `call` until `leaf`'s work is running, then drop it (the client goes away).
async fn drop_when_running<F: std::future::Future>(call: F, leaf: &Server) -> bool {
    tokio::select! {
        _ = call => panic!("the call finished instead of being dropped"),
        ran = leaf.stats.wait_for(Duration::from_secs(5), |s| s.live() == 1) => ran,
    }
}

#[tokio::test]
async fn dropping_the_call_cancels_the_hop_and_stops_its_work() {
    let leaf = serve_profile("leaf", Profile::default()).await;
    let mut client = grpc_client(&Profile::default(), &leaf.url());

    // Give up on the call as soon as the leaf's work is running.
    let ran = drop_when_running(budget(5_000).scope(client.call(call(&[], 10_000))), &leaf).await;
    assert!(ran, "the leaf's work had started");

    assert!(
        leaf.stats
            .wait_for(Duration::from_secs(1), |s| s.live() == 0)
            .await,
        "the leaf's work still runs after the client went away"
    );
    assert_eq!(
        *leaf.stats.work_stopped.lock().unwrap(),
        [Some(EndCause::Cancelled)]
    );
    assert_eq!(
        leaf.stats
            .work_done
            .load(std::sync::atomic::Ordering::SeqCst),
        0
    );
    assert!(
        leaf.stats
            .wait_for(Duration::from_secs(1), |s| !s
                .request_end
                .lock()
                .unwrap()
                .is_empty())
            .await
    );
    assert_eq!(
        *leaf.stats.request_end.lock().unwrap(),
        [Some(EndCause::Cancelled)]
    );
}

#[tokio::test]
async fn cancellation_flows_down_a_chain() {
    // client -> mid -> leaf; the client gives up. mid's budget is cancelled, its client
    // layer stops waiting (resetting the stream to leaf), and leaf's work stops too.
    let leaf = serve_profile("leaf", Profile::default()).await;
    let mid = serve_profile("mid", Profile::default()).await;
    let mut client = grpc_client(&Profile::default(), &mid.url());

    let ran = drop_when_running(
        budget(5_000).scope(client.call(call(&[&leaf.url()], 10_000))),
        &leaf,
    )
    .await;
    assert!(ran, "the leaf's work had started");

    assert!(
        leaf.stats
            .wait_for(Duration::from_secs(1), |s| s.live() == 0)
            .await,
        "an orphan: the leaf still works for a caller that left"
    );
    assert_eq!(
        *leaf.stats.work_stopped.lock().unwrap(),
        [Some(EndCause::Cancelled)]
    );
    assert!(
        mid.stats
            .wait_for(Duration::from_secs(1), |s| !s
                .request_end
                .lock()
                .unwrap()
                .is_empty())
            .await
    );
    assert_eq!(
        *mid.stats.request_end.lock().unwrap(),
        [Some(EndCause::Cancelled)]
    );
}

#[tokio::test]
async fn a_cancelled_parent_budget_stops_the_outbound_wait() {
    // In process: the request's budget is cancelled while a call is in flight. The client
    // layer answers CANCELLED at once and the downstream's work stops.
    let leaf = serve_profile("leaf", Profile::default()).await;
    let mut client = grpc_client(&Profile::default(), &leaf.url());
    let parent = budget(5_000);
    let canceller = {
        let parent = parent.clone();
        let stats = leaf.stats.clone();
        async move {
            stats
                .wait_for(Duration::from_secs(1), |s| s.live() == 1)
                .await;
            parent.cancel();
        }
    };
    let (result, ()) = tokio::join!(parent.scope(client.call(call(&[], 10_000))), canceller);
    let status = result.expect_err("cancelled");
    assert_eq!(status.code(), tonic::Code::Cancelled, "{status:?}");
    assert!(
        leaf.stats
            .wait_for(Duration::from_secs(1), |s| s.live() == 0)
            .await
    );
    assert_eq!(
        *leaf.stats.work_stopped.lock().unwrap(),
        [Some(EndCause::Cancelled)]
    );
}
