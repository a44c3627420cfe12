//! S10 on a real Kafka-protocol broker: a backlog of 10,000 records, half of whose deadlines
//! lapse while they wait. Nothing expired is processed, nothing is lost, and that still holds
//! when the consumer is killed mid-drain and restarted in the same group.
//!
//! The drain rate is printed (run with `--nocapture`) beside that of a consumer processing
//! every record of the same backlog, not asserted.
//!
//! The records are produced one per record batch (`unbatched_producer`): tansu 0.6 drops the
//! rest of a batch for a consumer restarted from an offset inside it (see `kafka_support`).
#![cfg(feature = "kafka")]

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::kafka_support::*;
use hopbudget::clock::{SystemClock, WallClock};
use hopbudget::queue::ConsumerStats;
use hopbudget::queue::kafka::{Consumer, Producer};
use hopbudget::queue::{Gate, HeaderCarrier, REASON_HEADER};
use hopbudget::{Profile, RequestBudget};
use rdkafka::Message;
use rdkafka::message::{Header, OwnedHeaders};

const N: usize = 10_000;
const SHORT: Duration = Duration::from_millis(200);
const LONG: Duration = Duration::from_secs(300);
/// What processing one record costs (charging a card); as in the NATS S10 test.
const WORK: Duration = Duration::from_millis(1);

fn is_short(id: usize) -> bool {
    id % 2 == 0
}

#[derive(Default)]
struct Ledger {
    processed: HashSet<usize>,
    runs: usize,
    expired_processed: Vec<usize>,
}

fn start_consumer(
    brokers: &str,
    group: &str,
    topic: &str,
    dead: &str,
    profile: &Profile,
    ledger: Arc<Mutex<Ledger>>,
) -> (Consumer, tokio::task::JoinHandle<()>) {
    let (_, _, skew) = profile.queue();
    let records = consumer(brokers, group, topic);
    let consumer = Consumer::new(
        Gate::new(profile, "orders"),
        unbatched_producer(brokers),
        dead.to_owned(),
    );
    let task = tokio::spawn({
        let consumer = consumer.clone();
        async move {
            let handler = |m: rdkafka::message::OwnedMessage| {
                let ledger = ledger.clone();
                async move {
                    let id: usize = std::str::from_utf8(m.payload().unwrap())
                        .unwrap()
                        .parse()
                        .unwrap();
                    let h = m.headers().unwrap();
                    let deadline: u64 =
                        std::str::from_utf8(HeaderCarrier::get(h, "deadline-epoch-ms").unwrap())
                            .unwrap()
                            .parse()
                            .unwrap();
                    if SystemClock.now_unix_ms() >= deadline + skew.as_millis() as u64 {
                        ledger.lock().unwrap().expired_processed.push(id);
                    }
                    tokio::time::sleep(WORK).await;
                    let mut l = ledger.lock().unwrap();
                    l.runs += 1;
                    l.processed.insert(id);
                    Ok::<(), std::convert::Infallible>(())
                }
            };
            // `records` is dropped with the task: the kill closes the consumer.
            let _ = consumer.run(&records, handler).await;
        }
    });
    (consumer, task)
}

fn handled(s: ConsumerStats) -> u64 {
    s.processed + s.dead_lettered()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s10_backlog_drains_without_processing_expired_and_survives_a_kill() {
    let brokers = ensure_broker();
    let topic = unique("hb-s10");
    let dead = format!("{topic}.dead");
    create_topics(&brokers, &[&topic, &dead]).await;
    let profile = Profile::default().with_service("billing");

    // The consumer is stopped while the backlog builds up.
    let producer = Producer::new(unbatched_producer(&brokers), &profile);
    let mut pending = Vec::with_capacity(N);
    for id in 0..N {
        let budget =
            RequestBudget::local(if is_short(id) { SHORT } else { LONG }, profile.policy());
        let producer = producer.clone();
        let topic = topic.clone();
        // Each record comes from its own request, with its own budget.
        pending.push(tokio::spawn(budget.scope(async move {
            let key = id.to_string();
            let headers = OwnedHeaders::new().insert(Header {
                key: "order-id",
                value: Some(&key),
            });
            producer
                .send(&topic, Some(&key), &key, headers)
                .await
                .map(drop)
        })));
        if pending.len() == 1_000 {
            for p in pending.drain(..) {
                p.await.unwrap().unwrap();
            }
        }
    }
    for p in pending {
        p.await.unwrap().unwrap();
    }
    let (_, _, skew) = profile.queue();
    tokio::time::sleep(SHORT + skew + Duration::from_millis(100)).await;

    let group = unique("billing");
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let started = Instant::now();
    let (first, task) = start_consumer(&brokers, &group, &topic, &dead, &profile, ledger.clone());
    tokio::time::timeout(Duration::from_secs(60), async {
        while handled(first.stats()) < (N / 3) as u64 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("first consumer made no progress in 60 s");
    task.abort();
    let _ = task.await;
    let killed_at = handled(first.stats());

    let restarted = Instant::now();
    let (second, task) = start_consumer(&brokers, &group, &topic, &dead, &profile, ledger.clone());
    tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            // The N records sit at offsets 0..N of a fresh one-partition topic. tansu 0.6
            // answers ListOffsets(latest) with the newest batch's base offset + 1, not the high
            // watermark, so the committed offset alone decides.
            let (committed, _) = committed_and_end(&brokers, &group, &topic);
            if committed >= N as i64 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "backlog not drained in 120 s after the restart: {:?}",
            committed_and_end(&brokers, &group, &topic)
        )
    });
    let drained = started.elapsed();
    let second_took = restarted.elapsed();
    task.abort();
    let _ = task.await;

    let copies = read_all(&brokers, &dead, N / 2).await;
    let mut dead_ids = HashSet::new();
    for m in &copies {
        let h = m.headers().unwrap();
        assert_eq!(HeaderCarrier::get(h, REASON_HEADER), Some(&b"expired"[..]));
        let id: usize = std::str::from_utf8(HeaderCarrier::get(h, "order-id").unwrap())
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(m.payload(), Some(id.to_string().as_bytes()));
        dead_ids.insert(id);
    }
    let ledger = std::mem::take(&mut *ledger.lock().unwrap());
    let short: HashSet<usize> = (0..N).filter(|i| is_short(*i)).collect();
    let long: HashSet<usize> = (0..N).filter(|i| !is_short(*i)).collect();
    assert!(
        ledger.expired_processed.is_empty(),
        "expired records processed: {:?}",
        &ledger.expired_processed[..ledger.expired_processed.len().min(10)]
    );
    assert!(
        ledger.processed.is_disjoint(&short),
        "a record whose deadline lapsed in the backlog was processed"
    );
    assert_eq!(ledger.processed, long, "every live record processed");
    assert_eq!(dead_ids, short, "every expired record dead-lettered");
    assert_eq!(
        ledger.processed.len() + dead_ids.len(),
        N,
        "processed + dead-lettered = N"
    );

    // The same backlog read by a consumer that processes every record (no gate), committing
    // each as the gated one does: what draining it would cost without deadlines.
    let every = process_every_record(&brokers, &topic).await;

    let secs = drained.as_secs_f64();
    println!(
        "S10 over Kafka (tansu): {N} records drained in {secs:.2} s ({:.0} rec/s) with a kill and restart \
         (the restarted consumer: {} records in {:.2} s, {:.0} rec/s); first consumer handled {killed_at} \
         before the kill; handler runs {} for {} live records, {} dead-letter copies for {} expired. \
         Processing every record: {:.2} s ({:.0} rec/s)",
        N as f64 / secs,
        handled(second.stats()),
        second_took.as_secs_f64(),
        handled(second.stats()) as f64 / second_took.as_secs_f64(),
        ledger.runs,
        long.len(),
        copies.len(),
        short.len(),
        every.as_secs_f64(),
        N as f64 / every.as_secs_f64(),
    );
}

/// Read all N records of `topic` in a fresh group, run the work for every one and commit it;
/// returns how long that took.
async fn process_every_record(brokers: &str, topic: &str) -> Duration {
    use rdkafka::consumer::{CommitMode, Consumer as _};
    let records = consumer(brokers, &unique("everything"), topic);
    let started = Instant::now();
    let mut seen = HashSet::new();
    while seen.len() < N {
        let record = tokio::time::timeout(Duration::from_secs(30), records.recv())
            .await
            .expect("no record in 30 s while processing every record")
            .unwrap();
        tokio::time::sleep(WORK).await;
        seen.insert(record.offset());
        records.commit_message(&record, CommitMode::Async).unwrap();
    }
    started.elapsed()
}
