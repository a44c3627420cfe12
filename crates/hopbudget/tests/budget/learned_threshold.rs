//! The learned refuse threshold through the HTTP server layer, on tokio's paused clock: a
//! route with `learn:` refuses below `max(min_budget_ms, learned p50)`, starts cold on the
//! static value, and follows its own latency up and back down (rule C3).
#![cfg(feature = "http")]

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use hopbudget::Profile;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use tower::{Service, ServiceBuilder, ServiceExt};

const PROFILE: &str = "routes:
  - path: /tax
    min_budget_ms: 20
    learn: { quantile: p50, window_ms: 8000, min_samples: 10 }
  - path: /static
    min_budget_ms: 20
";

/// The handler's own work, changeable between requests.
type Work = Arc<AtomicU64>;

fn service(
    profile: Profile,
    work: Work,
) -> impl Service<Request<Full<Bytes>>, Response = Response<impl http_body::Body>, Error = Infallible>
+ Clone {
    ServiceBuilder::new()
        .layer(hopbudget::http::server::ServerBudgetLayer::new(profile))
        .service_fn(move |_req: Request<Full<Bytes>>| {
            let ms = work.load(Ordering::Relaxed);
            async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
            }
        })
}

fn request(path: &str, budget_ms: u64) -> Request<Full<Bytes>> {
    Request::get(path)
        .header("x-request-timeout-ms", budget_ms.to_string())
        .body(Full::new(Bytes::new()))
        .unwrap()
}

/// `n` requests with a roomy budget, each taking the current work: completed, so learned.
async fn traffic<S, B>(svc: &S, n: usize)
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>, Error = Infallible> + Clone,
    B: http_body::Body,
{
    for _ in 0..n {
        let res = svc.clone().oneshot(request("/tax", 2_000)).await.unwrap();
        assert_eq!(res.status(), 200);
        let _ = res.into_body().collect().await;
    }
}

/// Send one request; its status and, for a refusal, the budget it said it needed.
async fn probe<S, B>(svc: &S, path: &str, budget_ms: u64) -> (u16, Option<u64>)
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>, Error = Infallible> + Clone,
    B: http_body::Body,
{
    let res = svc.clone().oneshot(request(path, budget_ms)).await.unwrap();
    let required = res
        .headers()
        .get("x-deadline-required-ms")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let status = res.status().as_u16();
    let _ = res.into_body().collect().await;
    (status, required)
}

fn near(required: Option<u64>, want: u64) -> bool {
    required.is_some_and(|r| r >= want && r <= want + want / 8)
}

#[tokio::test(start_paused = true)]
async fn the_threshold_follows_the_routes_own_latency_up_and_down() {
    let profile = Profile::from_yaml(PROFILE, "learned.yaml").unwrap();
    let work: Work = Arc::new(AtomicU64::new(100));
    let svc = service(profile, work.clone());

    // Cold start: the static 20 ms applies, so 60 ms is enough to start.
    work.store(5, Ordering::Relaxed);
    assert_eq!(probe(&svc, "/tax", 60).await.0, 200);

    // The route takes 100 ms: once a slice has closed, less than that is refused, stating it.
    work.store(100, Ordering::Relaxed);
    traffic(&svc, 30).await;
    tokio::time::advance(Duration::from_secs(1)).await;
    let (status, required) = probe(&svc, "/tax", 60).await;
    assert_eq!(status, 503);
    assert!(near(required, 100), "{required:?}");
    // A route without `learn:` keeps its static threshold.
    work.store(5, Ordering::Relaxed);
    assert_eq!(probe(&svc, "/static", 60).await.0, 200);

    // It gets faster: after a window of fast requests the threshold comes down to the static
    // floor again and a 60 ms budget is admitted.
    work.store(10, Ordering::Relaxed);
    for _ in 0..8 {
        traffic(&svc, 30).await;
        tokio::time::advance(Duration::from_secs(1)).await;
    }
    assert_eq!(probe(&svc, "/tax", 60).await.0, 200);

    // And slower again: the threshold climbs to the new latency.
    work.store(150, Ordering::Relaxed);
    for _ in 0..8 {
        traffic(&svc, 10).await;
        tokio::time::advance(Duration::from_secs(1)).await;
    }
    let (status, required) = probe(&svc, "/tax", 100).await;
    assert_eq!(status, 503);
    assert!(near(required, 150), "{required:?}");
}

#[tokio::test(start_paused = true)]
async fn only_completed_answers_teach() {
    let profile = Profile::from_yaml(PROFILE, "learned.yaml").unwrap();
    // Runs out of budget (the layer answers 504 at the deadline)...
    let slow = service(profile.clone(), Arc::new(AtomicU64::new(500)));
    for _ in 0..30 {
        assert_eq!(probe(&slow, "/tax", 100).await.0, 504);
    }
    // ...or answers 504 itself after 300 ms (C17: recorded as expired, not completed).
    let own_504 = ServiceBuilder::new()
        .layer(hopbudget::http::server::ServerBudgetLayer::new(
            profile.clone(),
        ))
        .service_fn(|_req: Request<Full<Bytes>>| async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let mut res = Response::new(Full::new(Bytes::new()));
            *res.status_mut() = http::StatusCode::GATEWAY_TIMEOUT;
            Ok::<_, Infallible>(res)
        });
    for _ in 0..30 {
        assert_eq!(probe(&own_504, "/tax", 2_000).await.0, 504);
    }
    tokio::time::advance(Duration::from_secs(1)).await;
    let rule = profile.route("/tax").unwrap();
    assert_eq!(rule.learned().unwrap().learned(), None, "nothing completed");
    assert_eq!(rule.threshold(), Duration::from_millis(20));
}
