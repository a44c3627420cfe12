//! Unit tests of the client layer's classification, with an in-process stand-in for the
//! channel and tokio's paused clock.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use tower::{ServiceBuilder, ServiceExt, service_fn};

use super::GrpcClientLayer;
use crate::{budget::RequestBudget, profile::Profile};

fn budget(ms: u64) -> RequestBudget {
    RequestBudget::local(Duration::from_millis(ms), Profile::default().policy())
}

fn request() -> http::Request<()> {
    http::Request::builder().uri("/x.X/Y").body(()).unwrap()
}

/// A peer that waits `after`, then answers trailers-only CANCELLED.
fn cancelling_peer(
    after: Duration,
) -> impl tower::Service<
    http::Request<()>,
    Response = http::Response<Empty<Bytes>>,
    Error = Infallible,
    Future = impl Send,
> + Clone {
    service_fn(move |_req: http::Request<()>| async move {
        tokio::time::sleep(after).await;
        Ok::<_, Infallible>(tonic::Status::cancelled("peer gave up").into_http())
    })
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_after_the_deadline_is_reported_as_deadline_exceeded() {
    // 100 ms budget: 94 ms forwarded; the peer answers CANCELLED at 94 ms.
    let client = ServiceBuilder::new()
        .layer(GrpcClientLayer::new(Profile::default()))
        .service(cancelling_peer(Duration::from_millis(94)));
    let res = budget(100).scope(client.oneshot(request())).await.unwrap();
    assert_eq!(res.headers()["grpc-status"], "4");
    assert_eq!(res.headers()["x-deadline-outcome"], "expired");
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_before_the_deadline_stays_cancelled() {
    let client = ServiceBuilder::new()
        .layer(GrpcClientLayer::new(Profile::default()))
        .service(cancelling_peer(Duration::from_millis(20)));
    let res = budget(100).scope(client.oneshot(request())).await.unwrap();
    assert_eq!(res.headers()["grpc-status"], "1");
}

#[tokio::test(start_paused = true)]
async fn a_late_cancelled_in_the_trailers_is_relabelled_too() {
    let peer = service_fn(|_req: http::Request<()>| async move {
        tokio::time::sleep(Duration::from_millis(95)).await;
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", "1".parse().unwrap());
        let body = Full::new(Bytes::from_static(b"\0\0\0\0\0"))
            .with_trailers(async move { Some(Ok::<_, Infallible>(trailers)) });
        Ok::<_, Infallible>(http::Response::new(body))
    });
    let client = ServiceBuilder::new()
        .layer(GrpcClientLayer::new(Profile::default()))
        .service(peer);
    let res = budget(100).scope(client.oneshot(request())).await.unwrap();
    let trailers = res
        .into_body()
        .collect()
        .await
        .unwrap()
        .trailers()
        .cloned()
        .unwrap();
    assert_eq!(trailers["grpc-status"], "4");
}

#[tokio::test(start_paused = true)]
async fn tonics_own_timer_error_is_expiry() {
    let peer = service_fn(|_req: http::Request<()>| async move {
        // Early, so that only the error's type can make it an expiry.
        tokio::time::sleep(Duration::from_millis(50)).await;
        Err::<http::Response<Empty<Bytes>>, _>(tower::BoxError::from(tonic::TimeoutExpired(())))
    });
    let client = ServiceBuilder::new()
        .layer(GrpcClientLayer::new(Profile::default()))
        .service(peer);
    let res = budget(100).scope(client.oneshot(request())).await.unwrap();
    assert_eq!(res.headers()["grpc-status"], "4");
}

#[tokio::test(start_paused = true)]
async fn other_errors_pass_through() {
    let peer = service_fn(|_req: http::Request<()>| async move {
        Err::<http::Response<Empty<Bytes>>, _>(tower::BoxError::from("connection refused"))
    });
    let client = ServiceBuilder::new()
        .layer(GrpcClientLayer::new(Profile::default()))
        .service(peer);
    let err = budget(100)
        .scope(client.oneshot(request()))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "connection refused");
}

#[tokio::test(start_paused = true)]
async fn the_wait_ends_at_the_deadline_minus_the_hop_margin() {
    let client = ServiceBuilder::new()
        .layer(GrpcClientLayer::new(Profile::default()))
        .service(cancelling_peer(Duration::from_secs(60)));
    let start = tokio::time::Instant::now();
    let res = budget(100).scope(client.oneshot(request())).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(95));
    assert_eq!(res.headers()["grpc-status"], "4");
}

/// [C8](crate::contract#c8) for gRPC: a call outside any request gets the edge total, and is counted and logged as
/// the HTTP client's is (the same code path, `outbound::Shared::budget_for`).
#[cfg(feature = "metrics")]
#[tokio::test(start_paused = true)]
async fn a_call_outside_any_request_uses_the_edge_total_and_is_counted() {
    use tower::Service;
    // A third party is told nothing (C19).
    let seen = service_fn(|req: http::Request<()>| async move {
        let sent = req.headers().get("grpc-timeout").cloned();
        Ok::<_, Infallible>(
            http::Response::builder()
                .header(
                    "seen",
                    sent.unwrap_or(http::HeaderValue::from_static("none")),
                )
                .body(())
                .unwrap(),
        )
    });
    let layer = GrpcClientLayer::new(Profile::default().with_service("cron"));
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    // By callee: a channel that names no destination, one to a host the default profile
    // trusts by its `*.internal` pattern, twice, and one to a third party.
    for destination in [
        None,
        Some("http://pricing.internal:50051"),
        Some("http://tax.internal:50051"),
        Some("https://api.stripe.com"),
    ] {
        let layer = match destination {
            Some(uri) => layer.clone().destination(&uri.parse().unwrap()),
            None => layer.clone(),
        };
        let mut client = ServiceBuilder::new().layer(layer).service(seen);
        let call = metrics::with_local_recorder(&recorder, || client.call(request()));
        let res = call.await.unwrap();
        if destination.is_none() {
            // 1000 ms edge total minus 5 ms margin minus 1 ms transit (C2).
            assert_eq!(res.headers()["seen"], "994000u");
        }
    }
    let text = recorder.handle().render();
    for (callee, count) in [("other", 2), ("*.internal", 2)] {
        assert!(
            text.contains(&format!(
                "hopbudget_deadline_missing_total{{service=\"cron\",route=\"(outbound)\",callee=\"{callee}\"}} {count}"
            )),
            "{callee}: {text}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_late_cancel_spelled_with_another_code_is_read_by_its_marker() {
    // A callee whose profile spells cancellation ABORTED marks it `cancelled`; arriving after
    // its deadline, it is expiry here too (C4: the marker, not a hard-coded CANCELLED).
    let peer = service_fn(|_req: http::Request<()>| async move {
        tokio::time::sleep(Duration::from_millis(94)).await;
        let status = crate::grpc::budget_status(
            &crate::error::BudgetError::Cancelled,
            &crate::status::GrpcStatusMap {
                cancelled: crate::status::GrpcCode::Aborted,
                ..Default::default()
            },
        );
        Ok::<_, Infallible>(status.into_http::<Empty<Bytes>>())
    });
    let client = ServiceBuilder::new()
        .layer(GrpcClientLayer::new(Profile::default()))
        .service(peer);
    let res = budget(100).scope(client.oneshot(request())).await.unwrap();
    assert_eq!(res.headers()["grpc-status"], "4");
    assert_eq!(res.headers()["x-deadline-outcome"], "expired");
}
