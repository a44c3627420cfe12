//! The queue boundary on a real NATS JetStream server (C11, S10): stamping, the gate before
//! any work, the dead-letter stream, and core NATS request/reply carrying the budget.
#![cfg(feature = "nats")]

mod nats_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::HeaderMap;
use hopbudget::codec::Carrier;
use hopbudget::queue::nats::{Consumer, Publisher, RequestError, Requester, Responder};
use hopbudget::queue::{DETAIL_HEADER, Gate, REASON_HEADER};
use hopbudget::{BudgetError, Profile, RequestBudget, Source};
use nats_support::*;

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
    let client = connect().await;
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
    assert!(
        seen[0].2 > Duration::from_secs(4) && seen[0].2 <= Duration::from_millis(5_044),
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
    let client = connect().await;
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
    let client = connect().await;
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
