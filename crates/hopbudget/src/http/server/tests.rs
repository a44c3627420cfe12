//! Time-driven behaviour of the server layer on tokio's paused clock.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use tower::{Service, ServiceBuilder, ServiceExt};

use super::ServerBudgetLayer;
use crate::{budget::RequestBudget, budget::Source, error::EndCause, profile::Profile};

type Seen = Arc<Mutex<Option<RequestBudget>>>;

/// A handler that records its budget, then sleeps `work` before answering.
fn service(
    profile: Profile,
    work: Duration,
    seen: Seen,
) -> impl Service<
    Request<Full<Bytes>>,
    Response = Response<super::ResponseBody<Full<Bytes>>>,
    Error = Infallible,
    Future: Send,
> + Clone {
    ServiceBuilder::new()
        .layer(ServerBudgetLayer::new(profile))
        .service_fn(move |_req: Request<Full<Bytes>>| {
            let seen = seen.clone();
            async move {
                *seen.lock().unwrap() = RequestBudget::current();
                tokio::time::sleep(work).await;
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"done"))))
            }
        })
}

/// Reads a response's body to its end at once, as hyper sends it: the hop ends there.
#[cfg(feature = "metrics")]
fn send_body_now<B: http_body::Body>(res: Response<B>)
where
    B::Error: std::fmt::Debug,
{
    use futures_util::FutureExt;
    res.into_body()
        .collect()
        .now_or_never()
        .expect("body ready at once")
        .unwrap();
}

fn get(timeout: Option<&str>) -> Request<Full<Bytes>> {
    let mut b = Request::get("/x");
    if let Some(t) = timeout {
        b = b.header("x-request-timeout-ms", t);
    }
    b.body(Full::new(Bytes::new())).unwrap()
}

#[tokio::test(start_paused = true)]
async fn expiry_answers_504_at_the_deadline_and_expires_the_tree() {
    let seen = Seen::default();
    let svc = service(Profile::default(), Duration::from_secs(10), seen.clone());
    let started = tokio::time::Instant::now();
    let res = svc.oneshot(get(Some("100"))).await.unwrap();
    assert_eq!(res.status(), 504);
    assert_eq!(res.headers()["x-deadline-outcome"], "expired");
    assert_eq!(started.elapsed(), Duration::from_millis(100));
    let budget = seen.lock().unwrap().clone().expect("handler ran");
    assert_eq!(budget.end_cause(), Some(EndCause::Expired));
    assert!(budget.token().is_cancelled(), "children are told (C7)");
}

#[tokio::test(start_paused = true)]
async fn a_dropped_response_future_cancels_the_budget() {
    let seen = Seen::default();
    let mut svc = service(Profile::default(), Duration::from_secs(10), seen.clone());
    let fut = svc.ready().await.unwrap().call(get(Some("1000")));
    let mut fut = Box::pin(fut);
    assert!(futures_util::poll!(fut.as_mut()).is_pending());
    tokio::time::advance(Duration::from_millis(50)).await;
    drop(fut); // hyper does this when the client disconnects
    let budget = seen.lock().unwrap().clone().expect("handler ran");
    assert_eq!(budget.end_cause(), Some(EndCause::Cancelled));
}

#[tokio::test(start_paused = true)]
async fn dropped_after_the_deadline_is_expired_not_cancelled() {
    let seen = Seen::default();
    let mut svc = service(Profile::default(), Duration::from_secs(10), seen.clone());
    let mut fut = Box::pin(svc.ready().await.unwrap().call(get(Some("100"))));
    assert!(futures_util::poll!(fut.as_mut()).is_pending());
    tokio::time::advance(Duration::from_millis(150)).await;
    drop(fut);
    let budget = seen.lock().unwrap().clone().expect("handler ran");
    assert_eq!(budget.end_cause(), Some(EndCause::Expired), "C4");
}

#[tokio::test(start_paused = true)]
async fn missing_is_the_edge_total_and_huge_is_clamped() {
    let seen = Seen::default();
    let profile = Profile::default();
    let svc = service(profile.clone(), Duration::ZERO, seen.clone());
    let res = svc.clone().oneshot(get(None)).await.unwrap();
    assert_eq!(res.status(), 200);
    let budget = seen.lock().unwrap().take().unwrap();
    assert_eq!(budget.source(), Source::Fallback, "C8");
    assert_eq!(budget.at_arrival(), profile.edge_total());

    svc.oneshot(get(Some("99999999999"))).await.unwrap();
    let budget = seen.lock().unwrap().take().unwrap();
    assert_eq!(budget.at_arrival(), profile.max(), "C9");
}

#[tokio::test(start_paused = true)]
async fn zero_is_already_expired_and_the_handler_is_not_entered() {
    let seen = Seen::default();
    let svc = service(Profile::default(), Duration::ZERO, seen.clone());
    let res = svc.oneshot(get(Some("0"))).await.unwrap();
    assert_eq!(res.status(), 504);
    assert!(seen.lock().unwrap().is_none());
}

#[tokio::test(start_paused = true)]
async fn stream_route_waits_for_the_first_frame_under_the_deadline() {
    let profile = Profile::from_yaml(
        "stream_lifetime_ms: 5000\nroutes: [{path: /events, mode: stream}]",
        "inline",
    )
    .unwrap();
    // The first frame comes after `first`, then one more frame 1 s later.
    let svc = |first: Duration| {
        ServiceBuilder::new()
            .layer(ServerBudgetLayer::new(profile.clone()))
            .service_fn(move |_req: Request<Full<Bytes>>| async move {
                let frames = futures_util::stream::unfold(0u8, move |n| async move {
                    match n {
                        0 => tokio::time::sleep(first).await,
                        1 => tokio::time::sleep(Duration::from_secs(1)).await,
                        _ => return None,
                    }
                    let frame = http_body::Frame::data(Bytes::from(vec![b'a' + n]));
                    Some((Ok::<_, Infallible>(frame), n + 1))
                });
                Ok::<_, Infallible>(Response::new(http_body_util::StreamBody::new(frames)))
            })
    };
    let req = || {
        Request::get("/events")
            .header("x-request-timeout-ms", "200")
            .body(Full::new(Bytes::new()))
            .unwrap()
    };
    // First chunk in time: the stream outlives the 200 ms deadline (C13).
    let res = svc(Duration::from_millis(50)).oneshot(req()).await.unwrap();
    assert_eq!(res.status(), 200);
    let body = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"ab");
    // First chunk too late: still time to say 504.
    let res = svc(Duration::from_millis(300))
        .oneshot(req())
        .await
        .unwrap();
    assert_eq!(res.status(), 504);
}

#[cfg(feature = "metrics")]
#[tokio::test(start_paused = true)]
async fn work_returning_after_its_deadline_is_counted_late() {
    use futures_util::FutureExt;
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let seen = Seen::default();
    let mut svc = service(Profile::default(), Duration::ZERO, seen);
    let fut = svc.ready().await.unwrap().call(get(Some("100")));
    // The deadline passes before the (instant) handler is first polled.
    tokio::time::advance(Duration::from_millis(130)).await;
    // The hop ends when its answer has gone out completely: read the body too.
    metrics::with_local_recorder(&recorder, || {
        let res = fut.now_or_never().expect("ready at once").unwrap();
        assert_eq!(res.status(), 200, "late work still answers");
        send_body_now(res);
    });
    let text = handle.render();
    assert!(text.contains("hopbudget_late_work_total"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn a_dropped_handler_sees_its_budget_and_the_cause_while_it_is_dropped() {
    /// Records, when dropped, the ambient budget's end cause.
    struct OnDrop(Arc<Mutex<Option<Option<EndCause>>>>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            *self.0.lock().unwrap() = Some(RequestBudget::current().and_then(|b| b.end_cause()));
        }
    }
    let at_drop = Arc::new(Mutex::new(None));
    let mut svc = ServiceBuilder::new()
        .layer(ServerBudgetLayer::new(Profile::default()))
        .service_fn({
            let at_drop = at_drop.clone();
            move |_req: Request<Full<Bytes>>| {
                let guard = OnDrop(at_drop.clone());
                async move {
                    let _guard = guard;
                    std::future::pending::<()>().await;
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::new())))
                }
            }
        });
    let mut fut = Box::pin(svc.ready().await.unwrap().call(get(Some("1000"))));
    assert!(futures_util::poll!(fut.as_mut()).is_pending());
    drop(fut);
    assert_eq!(
        *at_drop.lock().unwrap(),
        Some(Some(EndCause::Cancelled)),
        "the handler's clean-up runs inside the budget's scope, after the cancel (C5)"
    );
}

/// A request whose budget nothing else holds (the handler dropped its request, spawned
/// nothing) ends without the budget recording its end: nobody could observe it. The hop's
/// outcome must still be what the budget would have recorded: `expired` for a response body
/// dropped unfinished after the deadline, `completed` for an answer sent in time ([C4](crate::contract#c4), [C5](crate::contract#c5)).
#[cfg(feature = "metrics")]
#[tokio::test(start_paused = true)]
async fn an_unshared_budget_still_gives_the_hop_its_outcome() {
    use futures_util::FutureExt;
    use http_body_util::StreamBody;
    type Never = futures_util::stream::Pending<Result<http_body::Frame<Bytes>, Infallible>>;
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    // Answers at once with a body that never sends anything.
    let mut stalled = ServiceBuilder::new()
        .layer(ServerBudgetLayer::new(Profile::default()))
        .service_fn(|_req: Request<Full<Bytes>>| async {
            let body: StreamBody<Never> = StreamBody::new(futures_util::stream::pending());
            Ok::<_, Infallible>(Response::new(body))
        });
    let mut quick = ServiceBuilder::new()
        .layer(ServerBudgetLayer::new(Profile::default()))
        .service_fn(|_req: Request<Full<Bytes>>| async {
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"done"))))
        });
    let body = metrics::with_local_recorder(&recorder, || {
        let res = stalled
            .call(get(Some("100")))
            .now_or_never()
            .expect("ready at once")
            .unwrap();
        res.into_body()
    });
    tokio::time::advance(Duration::from_millis(150)).await;
    metrics::with_local_recorder(&recorder, || {
        // The client went away, mid-body, after the deadline had passed.
        drop(body);
        let res = quick
            .call(get(Some("100")))
            .now_or_never()
            .expect("ready at once")
            .unwrap();
        send_body_now(res);
    });
    let text = handle.render();
    let count = |outcome: &str| {
        let label = format!("outcome=\"{outcome}\"");
        text.lines()
            .find(|l| l.starts_with("hopbudget_hops_total") && l.contains(&label))
            .and_then(|l| l.rsplit(' ').next())
            .map(str::to_owned)
    };
    assert_eq!(count("expired").as_deref(), Some("1"), "{text}");
    assert_eq!(count("completed").as_deref(), Some("1"), "{text}");
    assert_eq!(count("cancelled"), None, "{text}");
}

/// [C13](crate::contract#c13): a stream route whose body's first frame is an error has not started streaming: its
/// budget keeps the request deadline instead of moving to the stream lifetime (issue #32).
#[tokio::test(start_paused = true)]
async fn a_first_frame_that_is_an_error_starts_no_stream() {
    let profile = Profile::from_yaml(
        "stream_lifetime_ms: 60000\nroutes: [{path: /events, mode: stream}]",
        "inline",
    )
    .unwrap();
    let seen = Seen::default();
    let svc = ServiceBuilder::new()
        .layer(ServerBudgetLayer::new(profile))
        .service_fn({
            let seen = seen.clone();
            move |_req: Request<Full<Bytes>>| {
                let seen = seen.clone();
                async move {
                    *seen.lock().unwrap() = RequestBudget::current();
                    let frames = futures_util::stream::iter([Err::<http_body::Frame<Bytes>, _>(
                        std::io::Error::other("upstream broke"),
                    )]);
                    Ok::<_, Infallible>(Response::new(http_body_util::StreamBody::new(frames)))
                }
            }
        });
    let req = Request::get("/events")
        .header("x-request-timeout-ms", "200")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let res = svc.oneshot(req).await.unwrap();
    let budget = seen.lock().unwrap().clone().expect("the handler ran");
    assert!(
        budget.remaining() <= Duration::from_millis(200),
        "an error first frame moved the budget to the stream lifetime: {:?} left",
        budget.remaining()
    );
    drop(res);
}
