//! The queue boundary on a real NATS JetStream server (C11, S10): stamping, the gate before
//! any work, the dead-letter stream, and core NATS request/reply carrying the budget.
//!
//! One file on purpose, over 500 lines: the tests share one JetStream setup (streams, consumers,
//! dead letters) defined here.
#![cfg(feature = "nats")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::nats_support::*;
use async_nats::HeaderMap;
use hopbudget::codec::Carrier;
use hopbudget::queue::nats::{Consumer, Publisher, RequestError, Requester, Responder};
use hopbudget::queue::{DETAIL_HEADER, Gate, REASON_HEADER};
use hopbudget::{BudgetError, Profile, RequestBudget, Source};

fn profile() -> Profile {
    Profile::default().with_service("billing")
}

/// What the handler saw: order id, budget source and remaining budget.
type Seen = Arc<Mutex<Vec<(String, Source, Duration)>>>;

async fn run_until_quiet(
    consumer: &Consumer,
    pull: async_nats::jetstream::consumer::PullConsumer,
    seen: Seen,
    expect: u64,
) {
    let handler = move |m: async_nats::Message| {
        let seen = seen.clone();
        async move {
            let b = RequestBudget::current().expect("the handler runs inside the message's budget");
            seen.lock().unwrap().push((
                String::from_utf8_lossy(&m.payload).into_owned(),
                b.source(),
                b.remaining(),
            ));
            Ok::<(), std::convert::Infallible>(())
        }
    };
    let run = consumer.run(pull, handler);
    let done = async {
        while consumer.stats().processed + consumer.stats().dead_lettered() < expect {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::select! {
        r = run => panic!("consumer stopped early: {r:?}"),
        r = tokio::time::timeout(Duration::from_secs(20), done) => r.expect("consumer did not finish in 20 s"),
    }
}

#[tokio::test]
async fn live_expired_malformed_and_missing_each_go_where_the_contract_says() {
    let Some(client) = connect().await else {
        return;
    };
    let streams = Streams::create(&client, "HB_GATE").await;
    let profile = profile();
    let publisher = Publisher::new(streams.js.clone(), &profile);

    // Live: published inside a request with 5 s left.
    let request = RequestBudget::local(Duration::from_secs(5), profile.policy());
    request
        .scope(publisher.publish(streams.subject.clone(), "live".into()))
        .await
        .unwrap();
    // Expired: a deadline an hour ago, with a header of the application's own.
    let mut stale = HeaderMap::new();
    stale.insert("deadline-epoch-ms", "1000");
    stale.insert("order-id", "stale-42");
    streams
        .js
        .publish_with_headers(streams.subject.clone(), stale, "stale".into())
        .await
        .unwrap()
        .await
        .unwrap();
    // Malformed, then missing: the consumer goes on past the malformed one.
    let mut bad = HeaderMap::new();
    bad.insert("deadline-epoch-ms", "soon");
    streams
        .js
        .publish_with_headers(streams.subject.clone(), bad, "malformed".into())
        .await
        .unwrap()
        .await
        .unwrap();
    streams
        .js
        .publish(streams.subject.clone(), "missing".into())
        .await
        .unwrap()
        .await
        .unwrap();

    let consumer = Consumer::new(
        Gate::new(&profile, "orders"),
        streams.js.clone(),
        streams.dead_subject.clone(),
    );
    let seen: Seen = Arc::default();
    run_until_quiet(
        &consumer,
        streams.consumer(Duration::from_secs(5)).await,
        seen.clone(),
        4,
    )
    .await;

    let seen = seen.lock().unwrap().clone();
    let names: Vec<&str> = seen.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["live", "missing"],
        "only live and missing messages are processed"
    );
    assert_eq!(seen[0].1, Source::Carrier(Carrier::Queue));
    // 5 s less the 6 ms reserve (C2), never plus the skew allowance (#32).
    assert!(
        seen[0].2 > Duration::from_secs(4) && seen[0].2 <= Duration::from_millis(4_994),
        "{:?}",
        seen[0].2
    );
    assert_eq!(
        seen[1].1,
        Source::Fallback,
        "no deadline: the edge total (C8)"
    );
    assert!(seen[1].2 <= profile.edge_total());

    let stats = consumer.stats();
    assert_eq!((stats.processed, stats.expired, stats.malformed), (2, 1, 1));

    let dead = streams.dead_letters().await;
    assert_eq!(dead.len(), 2);
    let by_payload = |p: &str| {
        dead.iter()
            .find(|m| m.payload == p.as_bytes())
            .unwrap()
            .headers
            .clone()
            .unwrap()
    };
    let stale = by_payload("stale");
    assert_eq!(stale.get(REASON_HEADER).unwrap().as_str(), "expired");
    assert_eq!(
        stale.get("order-id").unwrap().as_str(),
        "stale-42",
        "all original headers are kept"
    );
    assert_eq!(stale.get("deadline-epoch-ms").unwrap().as_str(), "1000");
    let bad = by_payload("malformed");
    assert_eq!(bad.get(REASON_HEADER).unwrap().as_str(), "malformed");
    assert!(
        bad.get(DETAIL_HEADER)
            .unwrap()
            .as_str()
            .contains("`deadline-epoch-ms`")
    );

    // Everything was acknowledged: nothing waits, nothing will come back.
    assert_eq!(streams.outstanding().await, (0, 0));
    streams.delete().await;
}

#[tokio::test]
async fn a_publish_below_the_threshold_sends_nothing() {
    let Some(client) = connect().await else {
        return;
    };
    let streams = Streams::create(&client, "HB_REFUSE").await;
    let profile = profile();
    let publisher = Publisher::new(streams.js.clone(), &profile);
    let short = RequestBudget::local(Duration::from_millis(12), profile.policy());
    let err = short
        .scope(publisher.publish(streams.subject.clone(), "x".into()))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("refused before start"), "{err}");
    let info = streams
        .js
        .get_stream(&streams.name)
        .await
        .unwrap()
        .cached_info()
        .clone();
    assert_eq!(info.state.messages, 0);
    streams.delete().await;
}

#[tokio::test]
async fn request_reply_carries_the_budget_and_the_responder_refuses_below_its_threshold() {
    let Some(client) = connect().await else {
        return;
    };
    let subject = unique("hb.tax").to_lowercase();
    let profile = profile();
    let entered = Arc::new(Mutex::new(Vec::<Duration>::new()));
    let responder = Responder::new(&profile).with_min_budget(Duration::from_millis(200));
    let server = tokio::spawn({
        let client = client.clone();
        let subject = subject.clone();
        let entered = entered.clone();
        async move {
            responder
                .serve(client, subject, move |_m| {
                    let entered = entered.clone();
                    async move {
                        let left = RequestBudget::current().unwrap().remaining();
                        entered.lock().unwrap().push(left);
                        bytes::Bytes::from_static(b"tax: 7.70")
                    }
                })
                .await
        }
    });
    // Let the subscription reach the server before the first request.
    client.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;

    let requester = Requester::new(client.clone(), &profile);
    let ok = RequestBudget::local(Duration::from_millis(800), profile.policy());
    let reply = ok
        .scope(requester.request(subject.clone(), "order 42".into()))
        .await
        .unwrap();
    assert_eq!(reply.payload, "tax: 7.70");
    let left = entered.lock().unwrap()[0];
    assert!(
        left <= Duration::from_millis(794) && left > Duration::from_millis(600),
        "{left:?}"
    );

    // S2 over NATS: 120 ms left, the responder needs 200 ms.
    let short = RequestBudget::local(Duration::from_millis(120), profile.policy());
    let err = short
        .scope(requester.request(subject.clone(), "order 43".into()))
        .await
        .unwrap_err();
    match err {
        RequestError::Budget {
            source: BudgetError::Refused(r),
            ..
        } => {
            assert_eq!(r.required(), Duration::from_millis(200));
            assert!(r.remaining() <= Duration::from_millis(114), "{r}");
        }
        other => panic!("{other}"),
    }
    assert_eq!(
        entered.lock().unwrap().len(),
        1,
        "the refused request never entered the handler"
    );

    // A malformed header is answered as such, naming it (C9).
    let mut headers = HeaderMap::new();
    headers.insert("x-request-timeout-ms", "lots");
    let reply = client
        .request_with_headers(subject.clone(), headers, "x".into())
        .await
        .unwrap();
    let h = reply.headers.unwrap();
    assert_eq!(h.get("x-deadline-outcome").unwrap().as_str(), "malformed");
    assert!(
        h.get("x-deadline-detail")
            .unwrap()
            .as_str()
            .contains("`x-request-timeout-ms`")
    );
    server.abort();
}

/// Serve `subject` with `handler` until the returned task is aborted; returns once the
/// subscription has reached the server.
async fn respond<H, Fut>(
    client: &async_nats::Client,
    subject: &str,
    handler: H,
) -> tokio::task::JoinHandle<()>
where
    H: Fn(async_nats::Message) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = bytes::Bytes> + Send + 'static,
{
    let server = tokio::spawn({
        let (client, subject) = (client.clone(), subject.to_owned());
        async move {
            let _ = Responder::new(&profile())
                .serve(client, subject, handler)
                .await;
        }
    });
    client.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    server
}

/// #32, item 7: a requester whose budget is cancelled (its caller went away) stops waiting
/// and says `cancelled`; before, it waited out the whole budget and said `expired`.
#[tokio::test]
async fn a_request_stops_waiting_when_its_budget_is_cancelled() {
    let Some(client) = connect().await else {
        return;
    };
    let subject = unique("hb.slow").to_lowercase();
    let entered = Arc::new(tokio::sync::Notify::new());
    let server = respond(&client, &subject, {
        let entered = entered.clone();
        move |_m| {
            let entered = entered.clone();
            async move {
                entered.notify_one();
                std::future::pending::<bytes::Bytes>().await
            }
        }
    })
    .await;
    let profile = profile();
    let requester = Requester::new(client.clone(), &profile);
    let caller = RequestBudget::local(Duration::from_secs(20), profile.policy());
    let waiting = tokio::spawn({
        let caller = caller.clone();
        let subject = subject.clone();
        async move {
            caller
                .scope(requester.request(subject, "order 42".into()))
                .await
        }
    });
    entered.notified().await;
    caller.cancel();
    let answer = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the requester stops waiting once its budget is cancelled")
        .unwrap();
    match answer {
        Err(RequestError::Budget {
            source: BudgetError::Cancelled,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    server.abort();
}

/// #32, item 7: an answer marked `cancelled` (the responder's budget was cancelled, it has
/// nothing to say) is an error, never `Ok` with an empty payload.
#[tokio::test]
async fn a_reply_marked_cancelled_is_not_an_empty_success() {
    let Some(client) = connect().await else {
        return;
    };
    let subject = unique("hb.gone").to_lowercase();
    let server = respond(&client, &subject, |_m| async {
        RequestBudget::current().unwrap().cancel();
        std::future::pending::<bytes::Bytes>().await
    })
    .await;
    let profile = profile();
    let requester = Requester::new(client.clone(), &profile);
    let caller = RequestBudget::local(Duration::from_secs(5), profile.policy());
    match requester
        .request_with(&caller, subject.clone(), "order 42".into())
        .await
    {
        Err(RequestError::Budget {
            source: BudgetError::Cancelled,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    server.abort();
}

/// Run `consumer` with `handler` until `done` holds (at most 20 s).
async fn run_until<H, Fut>(
    consumer: &Consumer,
    pull: async_nats::jetstream::consumer::PullConsumer,
    handler: H,
    done: impl Fn(&hopbudget::queue::ConsumerStats) -> bool,
) where
    H: Fn(async_nats::Message) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let run = consumer.run(pull, handler);
    let wait = async {
        while !done(&consumer.stats()) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::select! {
        r = run => panic!("consumer stopped early: {r:?}"),
        r = tokio::time::timeout(Duration::from_secs(20), wait) => r.expect("the consumer did not get there in 20 s"),
    }
}

/// #32, item 7: a handler that keeps failing retries a message under the budget it was first
/// given, then the message is dead-lettered as expired. Before, each nak redelivered it, and
/// one without a deadline header got a fresh edge total every time: it came back forever.
#[tokio::test]
async fn a_failing_handler_ends_in_an_expired_dead_letter_even_without_a_deadline() {
    let Some(client) = connect().await else {
        return;
    };
    let streams = Streams::create(&client, "HB_RETRY").await;
    let profile = Profile::from_yaml("service: billing\nedge_total_ms: 400\n", "p.yaml").unwrap();
    // No deadline header: the edge total, 400 ms, for all its attempts.
    streams
        .js
        .publish(streams.subject.clone(), "unstamped".into())
        .await
        .unwrap()
        .await
        .unwrap();
    // Stamped with about 400 ms: also ends `expired`, not `refused`.
    let request = RequestBudget::local(Duration::from_millis(406), profile.policy());
    request
        .scope(
            Publisher::new(streams.js.clone(), &profile)
                .publish(streams.subject.clone(), "stamped".into()),
        )
        .await
        .unwrap();

    let consumer = Consumer::new(
        Gate::new(&profile, "orders"),
        streams.js.clone(),
        streams.dead_subject.clone(),
    )
    .with_concurrency(2);
    let attempts = Arc::new(Mutex::new(Vec::<String>::new()));
    let handler = {
        let attempts = attempts.clone();
        move |m: async_nats::Message| {
            let attempts = attempts.clone();
            async move {
                attempts
                    .lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&m.payload).into_owned());
                Err::<(), _>("card service down".to_owned())
            }
        }
    };
    run_until(
        &consumer,
        streams.consumer(Duration::from_secs(5)).await,
        handler,
        |s| s.dead_lettered() >= 2,
    )
    .await;
    let stats = consumer.stats();
    assert_eq!(
        (stats.expired, stats.refused, stats.processed),
        (2, 0, 0),
        "{stats:?}"
    );
    let dead = streams.dead_letters().await;
    assert_eq!(dead.len(), 2);
    for m in &dead {
        let h = m.headers.as_ref().unwrap();
        assert_eq!(h.get(REASON_HEADER).unwrap().as_str(), "expired");
        assert!(
            h.get(DETAIL_HEADER)
                .unwrap()
                .as_str()
                .contains("during retries"),
            "{:?}",
            h.get(DETAIL_HEADER)
        );
    }
    let attempts = attempts.lock().unwrap().clone();
    for payload in ["unstamped", "stamped"] {
        // At most one attempt per 100 ms pause within 400 ms.
        let n = attempts.iter().filter(|p| *p == payload).count();
        assert!((2..=5).contains(&n), "{payload}: {n} attempts");
    }
    assert_eq!(streams.outstanding().await, (0, 0));
    streams.delete().await;
}

/// #32, item 7: a message that expires while it waits for a work slot is dead-lettered as
/// expired before any work (and its handler never runs), not "while the work ran".
#[tokio::test]
async fn a_message_expiring_while_it_waits_for_a_slot_is_dead_lettered_before_work() {
    let Some(client) = connect().await else {
        return;
    };
    let streams = Streams::create(&client, "HB_SLOT").await;
    let profile = profile();
    let publisher = Publisher::new(streams.js.clone(), &profile);
    // The first holds the only work slot until the second has been dead-lettered (or 5 s).
    RequestBudget::local(Duration::from_secs(10), profile.policy())
        .scope(publisher.publish(streams.subject.clone(), "slow".into()))
        .await
        .unwrap();
    RequestBudget::local(Duration::from_millis(300), profile.policy())
        .scope(publisher.publish(streams.subject.clone(), "short".into()))
        .await
        .unwrap();
    let consumer = Consumer::new(
        Gate::new(&profile, "orders"),
        streams.js.clone(),
        streams.dead_subject.clone(),
    );
    let ran = Arc::new(Mutex::new(Vec::<String>::new()));
    let held_until_dead_lettered = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let handler = {
        let (ran, counts, held) = (
            ran.clone(),
            consumer.clone(),
            held_until_dead_lettered.clone(),
        );
        move |m: async_nats::Message| {
            let (ran, counts, held) = (ran.clone(), counts.clone(), held.clone());
            async move {
                let payload = String::from_utf8_lossy(&m.payload).into_owned();
                ran.lock().unwrap().push(payload.clone());
                if payload == "slow" {
                    let limit = tokio::time::Instant::now() + Duration::from_secs(5);
                    while counts.stats().dead_lettered() == 0 && tokio::time::Instant::now() < limit
                    {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    held.store(
                        counts.stats().dead_lettered() > 0,
                        std::sync::atomic::Ordering::SeqCst,
                    );
                }
                Ok::<(), String>(())
            }
        }
    };
    run_until(
        &consumer,
        streams.consumer(Duration::from_secs(30)).await,
        handler,
        |s| s.processed + s.dead_lettered() >= 2,
    )
    .await;
    assert_eq!(*ran.lock().unwrap(), ["slow"], "the short one never ran");
    assert!(
        held_until_dead_lettered.load(std::sync::atomic::Ordering::SeqCst),
        "the short one was dead-lettered at its deadline, while the slot was still taken"
    );
    let dead = streams.dead_letters().await;
    assert_eq!(dead.len(), 1);
    let h = dead[0].headers.as_ref().unwrap();
    assert_eq!(h.get(REASON_HEADER).unwrap().as_str(), "expired");
    let detail = h.get(DETAIL_HEADER).unwrap().as_str();
    assert!(detail.contains("waited for a work slot"), "{detail}");
    assert_eq!(streams.outstanding().await, (0, 0));
    streams.delete().await;
}

/// #32, item 11: a message stamped with 93 ms left runs with at most 93 ms, never plus the
/// consumer's skew allowance: what its work calls is not told a deadline after the user's.
#[tokio::test]
async fn a_consumer_works_within_the_stamped_deadline() {
    let Some(client) = connect().await else {
        return;
    };
    let streams = Streams::create(&client, "HB_SKEW").await;
    let profile = profile();
    // A request with 99 ms left forwards 93 ms (C2: 5 ms margin, 1 ms transit).
    let request = RequestBudget::local(Duration::from_millis(99), profile.policy());
    let stamp = request
        .scope(
            Publisher::new(streams.js.clone(), &profile)
                .publish(streams.subject.clone(), "tight".into()),
        )
        .await
        .unwrap();
    let _ = stamp;
    let consumer = Consumer::new(
        Gate::new(&profile, "orders"),
        streams.js.clone(),
        streams.dead_subject.clone(),
    );
    let seen: Seen = Arc::default();
    run_until_quiet(
        &consumer,
        streams.consumer(Duration::from_secs(5)).await,
        seen.clone(),
        1,
    )
    .await;
    let seen = seen.lock().unwrap().clone();
    if let [(_, source, left)] = seen.as_slice() {
        assert_eq!(*source, Source::Carrier(Carrier::Queue));
        assert!(*left <= Duration::from_millis(93), "ran with {left:?}");
    } else {
        // Too slow a machine: it expired, or was refused, in the backlog; never processed late.
        assert_eq!(consumer.stats().processed, 0);
    }
    streams.delete().await;
}

/// #33, item 3 (C12): the publisher chooses the event's deadline. Inside a request with
/// 200 ms left, an event stamped with a deadline of its own (20 s, rooted at publish
/// time) is still processed after the request's budget is long gone; one that inherits the
/// request's deadline (the default) is dead-lettered as expired.
#[tokio::test]
async fn an_event_with_its_own_deadline_outlives_the_request_that_published_it() {
    use hopbudget::queue::{EventDeadline, Stamper};
    let Some(client) = connect().await else {
        return;
    };
    let streams = Streams::create(&client, "HB_OWN").await;
    let profile = profile();
    let inherit = Publisher::new(streams.js.clone(), &profile);
    let own = Publisher::with_stamper(
        streams.js.clone(),
        Stamper::new(&profile).with_deadline(EventDeadline::Own(Duration::from_secs(20))),
    );
    let request = RequestBudget::local(Duration::from_millis(200), profile.policy());
    request
        .scope(async {
            inherit
                .publish(streams.subject.clone(), "job".into())
                .await
                .unwrap();
            own.publish(streams.subject.clone(), "event".into())
                .await
                .unwrap();
        })
        .await;
    // The consumer is down for longer than the request's whole budget.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let consumer = Consumer::new(
        Gate::new(&profile, "orders"),
        streams.js.clone(),
        streams.dead_subject.clone(),
    );
    let seen: Seen = Arc::default();
    run_until_quiet(
        &consumer,
        streams.consumer(Duration::from_secs(5)).await,
        seen.clone(),
        2,
    )
    .await;
    let seen = seen.lock().unwrap().clone();
    let names: Vec<&str> = seen.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(names, ["event"]);
    assert!(seen[0].2 > Duration::from_secs(15), "{:?}", seen[0].2);
    let dead = streams.dead_letters().await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].payload, "job");
    assert_eq!(
        dead[0]
            .headers
            .as_ref()
            .unwrap()
            .get(REASON_HEADER)
            .unwrap()
            .as_str(),
        "expired"
    );
    streams.delete().await;
}

/// #33, item 1: a publisher's error converts as `BudgetError` does. An axum handler returns
/// it with `?`: a publish its budget cannot cover answers the contract's refusal (503,
/// `x-deadline-outcome: refused`), a broker failure (no stream captures the subject) 502; over
/// gRPC, the same as `From<BudgetError>` and UNAVAILABLE.
#[tokio::test]
async fn a_publish_error_answers_like_a_budget_error() {
    use axum::Router;
    use axum::routing::get;
    use hopbudget::http::server::ServerBudgetLayer;
    use hopbudget::queue::nats::PublishError;
    let Some(client) = connect().await else {
        return;
    };
    let streams = Streams::create(&client, "HB_ERR").await;
    let profile = profile();
    let publisher = Publisher::new(streams.js.clone(), &profile);
    let router = Router::new()
        .route(
            "/order",
            get({
                let (publisher, subject) = (publisher.clone(), streams.subject.clone());
                move || async move {
                    publisher.publish(subject, "order".into()).await?;
                    Ok::<_, PublishError>("published")
                }
            }),
        )
        .route(
            "/nowhere",
            get({
                let (publisher, subject) = (publisher.clone(), unique("hb.nowhere").to_lowercase());
                move || async move {
                    publisher.publish(subject, "order".into()).await?;
                    Ok::<_, PublishError>("published")
                }
            }),
        )
        .layer(ServerBudgetLayer::new(profile.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let http = reqwest::Client::new();
    let get = |path: &str, ms: &str| {
        http.get(format!("{url}{path}"))
            .header("x-request-timeout-ms", ms)
            .send()
    };

    // 15 ms: admitted (the threshold is 10 ms), but 9 ms forward cannot cover the publish.
    let res = get("/order", "15").await.unwrap();
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers()["x-deadline-outcome"], "refused");
    assert_eq!(get("/order", "5000").await.unwrap().status(), 200);
    let res = get("/nowhere", "5000").await.unwrap();
    assert_eq!(res.status(), 502, "{:?}", res.text().await);

    // Over gRPC: the deadline outcome as `From<BudgetError>` spells it.
    let short = RequestBudget::local(Duration::from_millis(3), profile.policy());
    let err = short
        .scope(publisher.publish(streams.subject.clone(), "x".into()))
        .await
        .unwrap_err();
    let budget = *err.budget_error().expect("a refusal");
    assert_eq!(
        tonic::Status::from(err).code(),
        tonic::Status::from(budget).code()
    );
    let err = publisher
        .publish(unique("hb.nowhere").to_lowercase(), "x".into())
        .await
        .unwrap_err();
    assert!(err.budget_error().is_none());
    assert_eq!(tonic::Status::from(err).code(), tonic::Code::Unavailable);
    server.abort();
    streams.delete().await;
}
