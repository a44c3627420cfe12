//! A real Kafka-protocol broker for the queue tests: `KAFKA_BROKERS`, default
//! `127.0.0.1:19092`. When nothing listens on the default address, the first test starts
//! `tansu` there with in-memory storage and waits until it accepts connections; the broker is
//! left running for the next test binary, like the machine's other services. Topics and
//! consumer groups are named for each run, so reruns never see old records.
#![allow(dead_code, unreachable_pub)]

use std::net::{SocketAddr, TcpStream};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, StreamConsumer};
use rdkafka::producer::FutureProducer;

pub const DEFAULT_BROKERS: &str = "127.0.0.1:19092";

pub fn brokers() -> String {
    std::env::var("KAFKA_BROKERS").unwrap_or_else(|_| DEFAULT_BROKERS.to_owned())
}

fn listening(addr: &str) -> bool {
    addr.parse::<SocketAddr>()
        .ok()
        .is_some_and(|a| TcpStream::connect_timeout(&a, Duration::from_millis(300)).is_ok())
}

/// Make sure a broker listens: the one `KAFKA_BROKERS` names, or a `tansu` this starts.
pub fn ensure_broker() -> String {
    static STARTED: OnceLock<Result<String, String>> = OnceLock::new();
    STARTED
        .get_or_init(|| {
            let brokers = brokers();
            let first = brokers.split(',').next().unwrap_or_default().to_owned();
            if listening(&first) {
                return Ok(brokers);
            }
            if brokers != DEFAULT_BROKERS {
                return Err(format!(
                    "no Kafka broker listens at {brokers} (KAFKA_BROKERS); start it, or unset \
                     KAFKA_BROKERS to let the tests start tansu on {DEFAULT_BROKERS}"
                ));
            }
            start_tansu()?;
            let until = Instant::now() + Duration::from_secs(60);
            while Instant::now() < until {
                if listening(&first) {
                    return Ok(brokers);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(format!(
                "tansu did not listen on {first} within 60 s; see {}",
                log_path().display()
            ))
        })
        .clone()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn log_path() -> std::path::PathBuf {
    std::env::temp_dir().join("hopbudget-tansu.log")
}

fn start_tansu() -> Result<(), String> {
    let log = std::fs::File::create(log_path()).map_err(|e| e.to_string())?;
    let err = log.try_clone().map_err(|e| e.to_string())?;
    let url = format!("tcp://{DEFAULT_BROKERS}");
    std::process::Command::new("tansu")
        .args([
            "broker",
            "--listener-url",
            &url,
            "--advertised-listener-url",
            &url,
            "--storage-engine",
            "memory://tansu/",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(err)
        .spawn()
        .map(drop)
        .map_err(|e| {
            format!(
                "no Kafka broker at {DEFAULT_BROKERS}, and `tansu` could not be started ({e}). \
                 Install it with `cargo install tansu --locked --features dynostore` (`.ci/run` \
                 does), or set KAFKA_BROKERS to a running broker."
            )
        })
}

/// A name unique to this test run.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() % 1_000_000_000_000)
        .unwrap_or(0);
    format!(
        "{prefix}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn config(brokers: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers);
    c
}

pub async fn create_topics(brokers: &str, topics: &[&str]) {
    let admin: AdminClient<DefaultClientContext> = config(brokers).create().unwrap();
    let new: Vec<NewTopic> = topics
        .iter()
        .map(|t| NewTopic::new(t, 1, TopicReplication::Fixed(1)))
        .collect();
    let results = admin
        .create_topics(
            &new,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .expect("creating topics failed");
    for r in results {
        r.unwrap_or_else(|(t, e)| panic!("creating topic {t} failed: {e}"));
    }
}

pub fn producer(brokers: &str) -> FutureProducer {
    config(brokers)
        .set("linger.ms", "5")
        .set("message.timeout.ms", "30000")
        .create()
        .unwrap()
}

/// A producer that sends every record in a record batch of its own, delivered at once.
///
/// tansu 0.6 (the release `cargo install tansu` gets; memory and other object-store engines)
/// answers a fetch from an offset inside a batch without that batch: it selects batches by
/// base offset alone (fixed upstream in 0.7.0-pre.1, "storage: return the batch containing a
/// mid-batch fetch offset"). A consumer restarted from a committed offset inside a batch then
/// never sees the rest of that batch. Kafka returns the batch whole; with one record per batch
/// every committed offset is a batch boundary, so the tests see what a Kafka broker would
/// serve. `broker_serves_a_fetch_from_inside_a_batch` (`tests/services/kafka/queue.rs`) reproduces the bug.
pub fn unbatched_producer(brokers: &str) -> FutureProducer {
    config(brokers)
        .set("linger.ms", "0")
        .set("batch.num.messages", "1")
        .set("message.timeout.ms", "30000")
        .create()
        .unwrap()
}

/// A consumer in `group`, reading `topic` from the start, committing by hand.
pub fn consumer(brokers: &str, group: &str, topic: &str) -> StreamConsumer {
    let c: StreamConsumer = config(brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .create()
        .unwrap();
    c.subscribe(&[topic]).unwrap();
    c
}

/// Every record on `topic` (one partition), read until `expect` arrived or 5 s pass quietly.
pub async fn read_all(
    brokers: &str,
    topic: &str,
    expect: usize,
) -> Vec<rdkafka::message::OwnedMessage> {
    use rdkafka::Message;
    let c = consumer(brokers, &unique("reader"), topic);
    let mut out = Vec::new();
    while out.len() < expect {
        match tokio::time::timeout(Duration::from_secs(5), c.recv()).await {
            Ok(Ok(m)) => out.push(m.detach()),
            Ok(Err(e)) => panic!("reading {topic}: {e}"),
            Err(_) => break,
        }
    }
    // Anything beyond `expect` (duplicates) that is already there.
    while let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(500), c.recv()).await {
        let _ = m.payload();
        out.push(m.detach());
    }
    out
}

/// The group's committed offset and what the broker answers to ListOffsets(latest), partition 0
/// (the high watermark on Kafka; on tansu 0.6 the newest batch's base offset + 1).
pub fn committed_and_end(brokers: &str, group: &str, topic: &str) -> (i64, i64) {
    use rdkafka::TopicPartitionList;
    let c: BaseConsumer = config(brokers).set("group.id", group).create().unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, 0);
    let committed = c
        .committed_offsets(tpl, Duration::from_secs(5))
        .ok()
        .and_then(|l| l.find_partition(topic, 0).and_then(|p| p.offset().to_raw()))
        .unwrap_or(-1);
    let (_, high) = c
        .fetch_watermarks(topic, 0, Duration::from_secs(5))
        .unwrap();
    (committed, high)
}
