//! `hopbudget audit --kafka BROKERS --topic T --group G`: audit the spans an OpenTelemetry
//! Collector's Kafka exporter writes, as one of N instances in a consumer group.
//!
//! Each record is one `ExportTraceServiceRequest`, as the exporter writes it: `encoding:
//! otlp_proto` (its default) or `otlp_json`, told apart per record (OTLP JSON is an object, so
//! it starts with `{`; a protobuf request starts with a field tag). With the exporter's
//! `partition_traces_by_id: true` every record holds the spans of one trace and is keyed by
//! its trace id, so all of a trace's spans land on one partition, and the group's instances
//! (which share the partitions) each audit whole traces; `hopbudget audit --merge` then adds
//! their `--json` reports up ([`crate::audit::report::merge`]).
//!
//! Offsets are committed the way the Collector's own Kafka receiver does by default (its
//! `autocommit` every second), and only for records whose spans were handed to the audit
//! (the receiver's `message_marking: after: true`): a record's offset is stored once it has
//! been decoded into the audit, the stored offsets are committed every second
//! (`auto.commit.interval.ms`), when partitions are taken away in a rebalance (so the next
//! owner starts after them, and no trace is audited twice) and when the instance stops. A
//! record whose spans are already in an audit is not read again by the group; the audit
//! itself lives in memory until the report, so an instance that is killed (not stopped by
//! SIGINT or SIGTERM) loses its traces from the reports.
//!
//! One thread polls the consumer and owns the audit, so the audit sees every record in
//! order per partition. Memory is the audit's (`--max-open-spans`) plus librdkafka's fetch
//! queue (`queued.max.messages.kbytes`, settable with `--kafka-config`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::{ClientContext, TopicPartitionList};

use super::Encoding;
use super::feed::Feed;
use super::listen::Stopped;
use crate::audit::options::AuditOptions;

/// What to consume, and how.
#[derive(Clone, Debug)]
pub struct KafkaOptions {
    /// `bootstrap.servers`: `host:port[,host:port…]`.
    pub brokers: String,
    /// The topic the exporter writes (the exporter's default is `otlp_spans`).
    pub topic: String,
    /// The consumer group the instances share.
    pub group: String,
    /// Report every this often, besides when stopped.
    pub interval: Option<Duration>,
    /// Further librdkafka settings (`key=value`), applied last.
    pub config: Vec<(String, String)>,
}

/// The librdkafka settings, before the user's own.
fn client_config(k: &KafkaOptions) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &k.brokers)
        .set("group.id", &k.group)
        // The Collector's Kafka receiver's defaults: start at the end of a partition the
        // group has no offset for, commit every second.
        .set("auto.offset.reset", "latest")
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "1000")
        // Only what the audit has: the offset is stored by hand once a record is read.
        .set("enable.auto.offset.store", "false");
    for (key, value) in &k.config {
        c.set(key, value);
    }
    c.set_log_level(RDKafkaLogLevel::Warning);
    c
}

/// Logs librdkafka's errors and the group's rebalances on standard error, and commits what
/// the audit has before partitions are taken away.
struct AuditContext;

impl ClientContext for AuditContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        if (level as i32) <= (RDKafkaLogLevel::Warning as i32) {
            eprintln!("hopbudget audit: kafka: {fac}: {message}");
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        eprintln!("hopbudget audit: kafka: {error}: {reason}");
    }
}

fn partitions(list: &TopicPartitionList) -> String {
    let mut v: Vec<String> = list
        .elements()
        .iter()
        .map(|e| format!("{}[{}]", e.topic(), e.partition()))
        .collect();
    v.sort();
    if v.is_empty() {
        "none".to_owned()
    } else {
        v.join(", ")
    }
}

impl ConsumerContext for AuditContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(list) = rebalance {
            // Every record polled so far has been audited and its offset stored (the audit
            // runs on this thread, between polls): commit them before another instance takes
            // the partitions, so it starts after them.
            commit(consumer);
            eprintln!(
                "hopbudget audit: kafka: partitions revoked: {}",
                partitions(list)
            );
        }
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(list) => {
                eprintln!(
                    "hopbudget audit: kafka: partitions assigned: {}",
                    partitions(list)
                );
            }
            Rebalance::Error(e) => eprintln!("hopbudget audit: kafka: rebalance failed: {e}"),
            Rebalance::Revoke(_) => {}
        }
    }
}

/// Commit the stored offsets now; nothing stored is not an error.
fn commit(consumer: &BaseConsumer<AuditContext>) {
    match consumer.commit_consumer_state(CommitMode::Sync) {
        Ok(()) => {}
        Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
        Err(e) => eprintln!("hopbudget audit: kafka: cannot commit offsets: {e}"),
    }
}

/// The encoding of one record: OTLP JSON is an object, anything else is read as protobuf.
fn encoding_of(payload: &[u8]) -> Encoding {
    match payload.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => Encoding::Json,
        _ => Encoding::Protobuf,
    }
}

/// Consume until SIGINT or SIGTERM: `ready` is called once subscribed, `periodic` with each
/// `--interval` report; returns the final report and what stopped it.
///
/// # Errors
/// The consumer cannot be created (a bad setting) or subscribed, or the signal handlers
/// cannot be installed.
pub(crate) fn consume<F: Feed>(
    opts: &AuditOptions,
    kafka: &KafkaOptions,
    ready: impl FnOnce(),
    mut periodic: impl FnMut(&F::Report),
) -> Result<(F::Report, Stopped), String> {
    let stop = signals().map_err(|e| format!("cannot install the signal handlers: {e}"))?;
    let consumer: BaseConsumer<AuditContext> = client_config(kafka)
        .create_with_context(AuditContext)
        .map_err(|e| format!("cannot create the Kafka consumer: {e}"))?;
    consumer
        .subscribe(&[&kafka.topic])
        .map_err(|e| format!("cannot subscribe to {}: {e}", kafka.topic))?;
    ready();
    let mut session = F::open(opts);
    let mut next_report = kafka.interval.map(|every| Instant::now() + every);
    let stopped = loop {
        match stop.load(Ordering::SeqCst) {
            INTERRUPT => break Stopped::Interrupt,
            TERMINATE => break Stopped::Terminate,
            _ => {}
        }
        if let (Some(at), Some(every)) = (next_report, kafka.interval)
            && Instant::now() >= at
        {
            periodic(&session.snapshot());
            next_report = Some(Instant::now() + every);
        }
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Err(e)) => eprintln!("hopbudget audit: kafka: {e}"),
            Some(Ok(m)) => {
                let label = format!("{}[{}]", m.topic(), m.partition());
                let offset = u64::try_from(m.offset()).unwrap_or(0);
                match m.payload() {
                    Some(p) if !p.is_empty() => {
                        // A record that is not a trace request is a problem in the report,
                        // like a bad line in a file; its offset is stored all the same.
                        let _ = session.record(p, encoding_of(p), &label, offset);
                    }
                    _ => session.problem(&label, offset, "empty record (no payload)".into()),
                }
                if let Err(e) = consumer.store_offset_from_message(&m) {
                    eprintln!("hopbudget audit: kafka: cannot store the offset of {label}: {e}");
                }
            }
        }
    };
    // What the audit has is committed before the group hears that this instance leaves.
    commit(&consumer);
    drop(consumer);
    Ok((session.finish(), stopped))
}

const RUNNING: u8 = 0;
const INTERRUPT: u8 = 1;
const TERMINATE: u8 = 2;

/// A flag set by SIGINT or SIGTERM, from a thread of its own.
fn signals() -> std::io::Result<Arc<AtomicU8>> {
    use tokio::signal::unix::{SignalKind, signal};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (mut term, mut int) = {
        let _entered = runtime.enter();
        (
            signal(SignalKind::terminate())?,
            signal(SignalKind::interrupt())?,
        )
    };
    let flag = Arc::new(AtomicU8::new(RUNNING));
    let set = flag.clone();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            runtime.block_on(async {
                let why = tokio::select! {
                    _ = term.recv() => TERMINATE,
                    _ = int.recv() => INTERRUPT,
                };
                set.store(why, Ordering::SeqCst);
            });
        })?;
    Ok(flag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_records_are_told_from_protobuf_by_their_first_byte() {
        assert!(matches!(
            encoding_of(b" {\"resourceSpans\":[]}"),
            Encoding::Json
        ));
        assert!(matches!(
            encoding_of(&[0x0a, 0x02, 0x0a, 0x00]),
            Encoding::Protobuf
        ));
    }
}
