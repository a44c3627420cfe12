//! The queue boundary on a real Kafka-protocol broker (C11, S10): stamping, the gate before
//! any work, and the dead-letter topic. The broker is `KAFKA_BROKERS`, or a `tansu` the tests
//! start (see `kafka_support`).
#![cfg(feature = "kafka")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::kafka_support::*;
use hopbudget::codec::Carrier;
use hopbudget::queue::kafka::{Consumer, Producer};
use hopbudget::queue::{DETAIL_HEADER, Gate, HeaderCarrier, REASON_HEADER};
use hopbudget::{Profile, RequestBudget, Source};
use rdkafka::Message;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;

fn header(h: &OwnedHeaders, name: &str) -> String {
    String::from_utf8_lossy(HeaderCarrier::get(h, name).unwrap_or_default()).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_expired_malformed_and_missing_each_go_where_the_contract_says() {
    let brokers = ensure_broker();
    let topic = unique("hb-gate");
    let dead = format!("{topic}.dead");
    create_topics(&brokers, &[&topic, &dead]).await;
    let profile = Profile::default().with_service("billing");
    let raw = producer(&brokers);
    let producer = Producer::new(raw.clone(), &profile);

    // Live, inside a request with 5 s left.
    let request = RequestBudget::local(Duration::from_secs(5), profile.policy());
    request
        .scope(producer.send(&topic, Some("1"), "live", OwnedHeaders::new()))
        .await
        .unwrap();
    // Expired an hour ago, with a header of the application's own; malformed; missing.
    for (payload, deadline) in [
        ("stale", Some("1000")),
        ("malformed", Some("soon")),
        ("missing", None),
    ] {
        let mut headers = OwnedHeaders::new().insert(Header {
            key: "order-id",
            value: Some(payload),
        });
        if let Some(d) = deadline {
            headers = headers.insert(Header {
                key: "deadline-epoch-ms",
                value: Some(d),
            });
        }
        raw.send(
            FutureRecord::to(&topic)
                .key(payload)
                .payload(payload)
                .headers(headers),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    }

    let group = unique("billing");
    let records = consumer(&brokers, &group, &topic);
    let gate = Gate::new(&profile, "orders");
    let consumer = Consumer::new(gate, raw.clone(), dead.clone());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let handler = |m: rdkafka::message::OwnedMessage| {
        let seen = seen.clone();
        async move {
            let b = RequestBudget::current().expect("the handler runs inside the record's budget");
            let name = String::from_utf8_lossy(m.payload().unwrap()).into_owned();
            seen.lock().unwrap().push((name, b.source(), b.remaining()));
            Ok::<(), std::convert::Infallible>(())
        }
    };
    let done = async {
        while consumer.stats().processed + consumer.stats().dead_lettered() < 4 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::select! {
        r = consumer.run(&records, handler) => panic!("consumer stopped: {r:?}"),
        r = tokio::time::timeout(Duration::from_secs(60), done) => r.expect("4 records not handled in 60 s"),
    }

    let seen = seen.lock().unwrap().clone();
    let names: Vec<&str> = seen.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["live", "missing"],
        "only live and missing records are processed"
    );
    assert_eq!(seen[0].1, Source::Carrier(Carrier::Queue));
    assert!(seen[0].2 > Duration::from_secs(3), "{:?}", seen[0].2);
    assert_eq!(
        seen[1].1,
        Source::Fallback,
        "no deadline: the edge total (C8)"
    );
    let stats = consumer.stats();
    assert_eq!((stats.processed, stats.expired, stats.malformed), (2, 1, 1));

    let copies = read_all(&brokers, &dead, 2).await;
    assert_eq!(copies.len(), 2);
    let by = |p: &str| {
        let m = copies
            .iter()
            .find(|m| m.payload() == Some(p.as_bytes()))
            .unwrap();
        assert_eq!(m.key(), Some(p.as_bytes()), "the key is kept");
        m.headers().unwrap().clone()
    };
    let stale = by("stale");
    assert_eq!(header(&stale, REASON_HEADER), "expired");
    assert_eq!(
        header(&stale, "order-id"),
        "stale",
        "all original headers are kept"
    );
    assert_eq!(header(&stale, "deadline-epoch-ms"), "1000");
    let bad = by("malformed");
    assert_eq!(header(&bad, REASON_HEADER), "malformed");
    assert!(header(&bad, DETAIL_HEADER).contains("`deadline-epoch-ms`"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_below_the_threshold_is_not_produced() {
    let brokers = ensure_broker();
    let topic = unique("hb-refuse");
    create_topics(&brokers, &[&topic]).await;
    let profile = Profile::default();
    let producer = Producer::new(producer(&brokers), &profile);
    let short = RequestBudget::local(Duration::from_millis(12), profile.policy());
    let err = short
        .scope(producer.send(&topic, None::<&str>, "x", OwnedHeaders::new()))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("refused before start"), "{err}");
    assert_eq!(
        committed_and_end(&brokers, &unique("g"), &topic).1,
        0,
        "nothing reached the topic"
    );
}

/// The smallest reproduction of why the S10 test produces one record per batch: ten records
/// in one batch, then a consumer placed at offset 5, as one restarted from a committed offset
/// 5 is. Kafka serves the batch whole and the client skips offsets 0-4; tansu 0.6 selects
/// batches by base offset alone, serves nothing, and the consumer waits forever (fixed
/// upstream in tansu 0.7.0-pre.1).
#[ignore = "fails against tansu 0.6, the broker the tests start: it serves nothing from inside a record batch; run with --ignored against another broker (KAFKA_BROKERS)"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_serves_a_fetch_from_inside_a_batch() {
    use rdkafka::consumer::{Consumer as _, StreamConsumer};
    use rdkafka::producer::FutureProducer;
    use rdkafka::{ClientConfig, Offset, TopicPartitionList};

    let brokers = ensure_broker();
    let topic = unique("hb-mid-batch");
    create_topics(&brokers, &[&topic]).await;
    // Queued together well within the linger: one batch.
    let batching: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("linger.ms", "500")
        .create()
        .unwrap();
    let mut deliveries = Vec::new();
    for i in 0..10 {
        let payload = i.to_string();
        deliveries.push(
            batching
                .send_result(FutureRecord::<(), _>::to(&topic).payload(&payload))
                .map_err(|(e, _)| e)
                .unwrap(),
        );
    }
    for (i, d) in deliveries.into_iter().enumerate() {
        let delivered = d.await.unwrap().unwrap();
        assert_eq!(delivered.offset, i as i64);
    }
    let reader: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("group.id", unique("mid-batch"))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut at = TopicPartitionList::new();
    at.add_partition_offset(&topic, 0, Offset::Offset(5))
        .unwrap();
    reader.assign(&at).unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), reader.recv())
        .await
        .expect("nothing served from offset 5 in 10 s: the broker left out the batch holding it")
        .unwrap();
    assert_eq!(first.offset(), 5);
    assert_eq!(first.payload(), Some(&b"5"[..]));
}

/// #32, item 7 (C6): a handler that keeps failing retries a record under the budget it was
/// first admitted with, then the record is dead-lettered as expired, committed, and the
/// partition moves on. Before, a record without a deadline header got a fresh edge total at
/// every check: never dead-lettered, never committed, the partition stuck; and a stamped one
/// that ran out during its retries ended `refused`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_handler_ends_in_an_expired_dead_letter_and_the_partition_moves_on() {
    let brokers = ensure_broker();
    let topic = unique("hb-retry");
    let dead = format!("{topic}.dead");
    create_topics(&brokers, &[&topic, &dead]).await;
    let profile = Profile::from_yaml("service: billing\nedge_total_ms: 400\n", "p.yaml").unwrap();
    let raw = producer(&brokers);
    // No deadline header: 400 ms (the edge total) for all its attempts.
    raw.send(
        FutureRecord::to(&topic)
            .key("unstamped")
            .payload("unstamped"),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    // Stamped with room for the consumer to join its group first.
    let request = RequestBudget::local(Duration::from_secs(8), profile.policy());
    request
        .scope(Producer::new(raw.clone(), &profile).send(
            &topic,
            Some("stamped"),
            "stamped",
            OwnedHeaders::new(),
        ))
        .await
        .unwrap();
    // Behind them on the partition: a record whose handler succeeds.
    raw.send(
        FutureRecord::to(&topic).key("next").payload("next"),
        Duration::from_secs(5),
    )
    .await
    .unwrap();

    let group = unique("billing");
    let records = consumer(&brokers, &group, &topic);
    let consumer = Consumer::new(Gate::new(&profile, "orders"), raw.clone(), dead.clone());
    let handler = |m: rdkafka::message::OwnedMessage| async move {
        match m.payload() {
            Some(b"next") => Ok(()),
            _ => Err("card service down"),
        }
    };
    let done = async {
        while consumer.stats().processed < 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::select! {
        r = consumer.run(&records, handler) => panic!("consumer stopped: {r:?}"),
        r = tokio::time::timeout(Duration::from_secs(60), done) => r.expect("the partition never got past the failing records"),
    }
    let stats = consumer.stats();
    assert_eq!(
        (stats.expired, stats.refused, stats.processed),
        (2, 0, 1),
        "{stats:?}"
    );
    let copies = read_all(&brokers, &dead, 2).await;
    assert_eq!(copies.len(), 2);
    for copy in &copies {
        let h = copy.headers().unwrap();
        assert_eq!(header(h, REASON_HEADER), "expired");
        assert!(
            header(h, DETAIL_HEADER).contains("during retries"),
            "{}",
            header(h, DETAIL_HEADER)
        );
    }
}
