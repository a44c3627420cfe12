//! S10 on a real NATS JetStream server: a backlog of 10,000 messages, half of whose
//! deadlines lapse while they wait. Nothing expired is processed, nothing is lost, and that
//! still holds when the consumer is killed mid-drain and restarted.
//!
//! The drain rate is printed (run with `--nocapture`), not asserted; the README's figure
//! comes from `cargo run -p hopbudget-examples --example queue_nats -- 10000 WORK_MS`.
#![cfg(feature = "nats")]

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::nats_support::*;
use async_nats::HeaderMap;
use hopbudget::clock::{SystemClock, WallClock};
use hopbudget::queue::nats::{Consumer, Publisher};
use hopbudget::queue::{Gate, REASON_HEADER};
use hopbudget::{Profile, RequestBudget};

const N: usize = 10_000;
/// Budget of the messages meant to lapse in the backlog.
const SHORT: Duration = Duration::from_millis(200);
/// Budget of the others: far longer than the whole test.
const LONG: Duration = Duration::from_secs(120);
/// What processing one message costs (charging a card).
const WORK: Duration = Duration::from_millis(1);

fn is_short(id: usize) -> bool {
    id % 2 == 0
}

#[derive(Default)]
struct Ledger {
    processed: HashSet<usize>,
    runs: usize,
    /// Messages whose deadline (plus skew) had passed when the handler started.
    expired_processed: Vec<usize>,
}

async fn publish_backlog(streams: &Streams, profile: &Profile) {
    let publisher = Publisher::new(streams.js.clone(), profile);
    let mut acks = Vec::with_capacity(512);
    for id in 0..N {
        // Each message comes from its own request, with its own budget.
        let budget =
            RequestBudget::local(if is_short(id) { SHORT } else { LONG }, profile.policy());
        let mut headers = HeaderMap::new();
        headers.insert("order-id", id.to_string());
        let send = publisher.send(streams.subject.clone(), headers, id.to_string().into());
        let (_, ack) = budget.scope(send).await.unwrap();
        acks.push(ack);
        if acks.len() == 512 {
            for ack in acks.drain(..) {
                ack.await.unwrap();
            }
        }
    }
    for ack in acks {
        ack.await.unwrap();
    }
}

/// One consumer process: its own connection, killed by aborting the task.
fn start_consumer(
    streams: &Streams,
    profile: &Profile,
    ledger: Arc<Mutex<Ledger>>,
) -> (Consumer, tokio::task::JoinHandle<()>) {
    let (_, _, skew) = profile.queue();
    let name = streams.name.clone();
    let dead_subject = streams.dead_subject.clone();
    let profile = profile.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let task = tokio::spawn(async move {
        let client = connect()
            .await
            .expect("NATS answered this test a moment ago");
        let js = async_nats::jetstream::new(client);
        let consumer = Consumer::new(Gate::new(&profile, "orders"), js.clone(), dead_subject)
            .with_concurrency(32);
        tx.send(consumer.clone()).unwrap();
        let pull = js
            .get_stream(&name)
            .await
            .unwrap()
            .get_consumer("worker")
            .await
            .unwrap();
        let handler = |m: async_nats::Message| {
            let ledger = ledger.clone();
            async move {
                let id: usize = std::str::from_utf8(&m.payload).unwrap().parse().unwrap();
                let deadline: u64 = m
                    .headers
                    .as_ref()
                    .unwrap()
                    .get("deadline-epoch-ms")
                    .unwrap()
                    .as_str()
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
        let _ = consumer.run(pull, handler).await;
    });
    // The consumer value is made inside the task; its counters are shared with this clone.
    let consumer = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("consumer did not start");
    (consumer, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s10_backlog_drains_without_processing_expired_and_survives_a_kill() {
    let Some(client) = connect().await else {
        return;
    };
    let streams = Streams::create(&client, "HB_S10").await;
    let profile = Profile::default().with_service("billing");
    // A short ack wait, so what the killed consumer held comes back quickly.
    streams.consumer(Duration::from_secs(2)).await;

    // The consumer is stopped while the backlog builds up.
    publish_backlog(&streams, &profile).await;
    let (_, _, skew) = profile.queue();
    tokio::time::sleep(SHORT + skew + Duration::from_millis(100)).await;
    assert_eq!(streams.outstanding().await, (N as u64, 0));

    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let started = Instant::now();
    let (first, task) = start_consumer(&streams, &profile, ledger.clone());
    // Kill it a third of the way through the drain.
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let s = first.stats();
            if s.processed + s.dead_lettered() >= (N / 3) as u64 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("first consumer made no progress in 30 s");
    task.abort();
    let _ = task.await;
    let killed_at = first.stats();

    let (second, task) = start_consumer(&streams, &profile, ledger.clone());
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if streams.outstanding().await == (0, 0) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("backlog not drained in 60 s after the restart");
    let drained = started.elapsed();
    task.abort();
    let _ = task.await;

    let dead = streams.dead_letters().await;
    let ledger = std::mem::take(&mut *ledger.lock().unwrap());
    let mut dead_ids = HashSet::new();
    for m in &dead {
        let h = m.headers.as_ref().unwrap();
        assert_eq!(h.get(REASON_HEADER).unwrap().as_str(), "expired");
        let id: usize = h.get("order-id").unwrap().as_str().parse().unwrap();
        assert_eq!(std::str::from_utf8(&m.payload).unwrap(), id.to_string());
        dead_ids.insert(id);
    }
    let short: HashSet<usize> = (0..N).filter(|i| is_short(*i)).collect();
    let long: HashSet<usize> = (0..N).filter(|i| !is_short(*i)).collect();

    assert!(
        ledger.expired_processed.is_empty(),
        "expired messages processed: {:?}",
        &ledger.expired_processed[..ledger.expired_processed.len().min(10)]
    );
    assert!(
        ledger.processed.is_disjoint(&short),
        "a message whose deadline lapsed in the backlog was processed"
    );
    assert_eq!(ledger.processed, long, "every live message processed");
    assert_eq!(dead_ids, short, "every expired message dead-lettered");
    assert_eq!(
        ledger.processed.len() + dead_ids.len(),
        N,
        "processed + dead-lettered = N"
    );

    let secs = drained.as_secs_f64();
    println!(
        "S10 over NATS JetStream: {N} messages drained in {secs:.2} s ({:.0} msg/s) with a kill and restart; \
         first consumer handled {} before the kill, second {}; handler runs {} for {} live messages \
         (redeliveries after the kill), {} dead-letter copies for {} expired",
        N as f64 / secs,
        killed_at.processed + killed_at.dead_lettered(),
        second.stats().processed + second.stats().dead_lettered(),
        ledger.runs,
        long.len(),
        dead.len(),
        short.len(),
    );
    streams.delete().await;
}
