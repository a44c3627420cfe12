use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::Message as _;
use rdkafka::consumer::{CommitMode, Consumer as _, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};

use super::Received;
use crate::queue::stats::Counts;
use crate::queue::{ConsumerStats, DeadLetter, Gate, Processed};

/// Pause before retrying a record whose handler failed, or a dead-letter copy that was not
/// delivered.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// A Kafka consumer loop with the deadline [`Gate`] before any work.
///
/// See the [module docs](super) for what happens to each kind of record, and the
/// [module example](super#examples) for the producer's side.
///
/// # Examples
///
/// The loop in a task, its counts read from a clone. It needs a live broker, so it is only
/// compiled (`no_run`).
///
/// ```no_run
/// # async fn charge(_order: Option<&[u8]>) -> Result<(), std::io::Error> { Ok(()) }
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use rdkafka::ClientConfig;
/// use rdkafka::Message as _;
/// use rdkafka::consumer::{Consumer as _, StreamConsumer};
/// use rdkafka::producer::FutureProducer;
/// use hopbudget::queue::kafka::Consumer;
/// use hopbudget::queue::Gate;
/// use hopbudget::Profile;
///
/// let profile = Profile::default().with_service("billing");
/// let dead_letters: FutureProducer = ClientConfig::new()
///     .set("bootstrap.servers", "127.0.0.1:19092")
///     .create()?;
/// let records: StreamConsumer = ClientConfig::new()
///     .set("bootstrap.servers", "127.0.0.1:19092")
///     .set("group.id", "billing")
///     .set("enable.auto.commit", "false") // the consumer commits each record itself
///     .create()?;
/// records.subscribe(&["orders"])?;
///
/// let consumer = Consumer::new(Gate::new(&profile, "orders"), dead_letters, "orders.dead");
/// let counts = consumer.clone(); // clones share the counts
/// let worker = tokio::spawn(async move {
///     consumer
///         .run(&records, |record| async move {
///             // `Err` retries the record while its deadline allows.
///             charge(record.payload()).await
///         })
///         .await
/// });
/// tokio::time::sleep(Duration::from_secs(60)).await;
/// let stats = counts.stats();
/// println!("{} processed, {} dead-lettered", stats.processed, stats.dead_lettered());
/// worker.abort();
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Consumer {
    gate: Gate,
    producer: FutureProducer,
    dead_letter_topic: Arc<str>,
    stats: Arc<Counts>,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("gate", &self.gate)
            .field("dead_letter_topic", &self.dead_letter_topic)
            .finish_non_exhaustive()
    }
}

impl Consumer {
    /// A consumer checking records with `gate` and producing the ones it will not process to
    /// `dead_letter_topic` through `producer`.
    ///
    /// See the [example](Self#examples).
    pub fn new(
        gate: Gate,
        producer: FutureProducer,
        dead_letter_topic: impl Into<Arc<str>>,
    ) -> Self {
        Self {
            gate,
            producer,
            dead_letter_topic: dead_letter_topic.into(),
            stats: Arc::default(),
        }
    }

    /// Counts so far; clones of this consumer share them.
    ///
    /// See the [example](Self#examples).
    pub fn stats(&self) -> ConsumerStats {
        self.stats.snapshot()
    }

    /// Consume from `consumer` (already subscribed, auto-commit off) until it fails or this
    /// future is dropped. `handler` gets each live record, inside its budget's scope and hop
    /// span; `Ok` commits it, `Err` retries it while its deadline allows.
    ///
    /// See the [example](Self#examples).
    pub async fn run<H, Fut, E>(
        &self,
        consumer: &StreamConsumer,
        handler: H,
    ) -> Result<(), KafkaError>
    where
        H: Fn(OwnedMessage) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: Display,
    {
        loop {
            let record = consumer.recv().await?;
            self.handle(&record, &handler).await;
            // Async: a commit lost to a crash redelivers the record (at least once), never
            // skips it.
            if let Err(error) = consumer.commit_message(&record, CommitMode::Async) {
                tracing::warn!(%error, "committing an offset failed; the record may be redelivered");
            }
        }
    }

    /// One record: the gate, then the handler (retried while the deadline allows) or the
    /// dead-letter topic. Returns once the record may be committed.
    ///
    /// Every retry runs under the budget the record was first admitted with (rule [C6](crate::contract#c6)), so a
    /// record without a deadline header is not given a fresh edge total on each attempt: a
    /// handler that keeps failing ends with the record dead-lettered as expired, and the
    /// partition moves on (#32).
    async fn handle<H, Fut, E>(&self, record: &BorrowedMessage<'_>, handler: &H)
    where
        H: Fn(OwnedMessage) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: Display,
    {
        let headers = Received(record.headers());
        let mut admitted = match self.gate.check(&headers).into_result() {
            Ok(admitted) => admitted,
            Err(dead) => return self.dead_letter(record, dead).await,
        };
        let first = admitted.budget().clone();
        loop {
            match admitted.run(handler(record.detach())).await {
                Processed::Completed(Ok(())) => {
                    self.stats.processed();
                    return;
                }
                Processed::Completed(Err(error)) => {
                    self.stats.failed();
                    tracing::warn!(%error, queue = self.gate.queue(), "handler failed; retrying while the deadline allows");
                }
                Processed::Expired(dead) => return self.dead_letter(record, dead).await,
                // The work cancelled its own budget: it did not finish, so it is tried again
                // (a later commit would otherwise skip it), still under the first budget.
                Processed::Cancelled => self.stats.failed(),
            }
            // No pause past the deadline: the retry check after it dead-letters the record.
            tokio::time::sleep(RETRY_PAUSE.min(first.deadline().remaining())).await;
            admitted = match self.gate.check_retry(&headers, &first).into_result() {
                Ok(admitted) => admitted,
                Err(dead) => return self.dead_letter(record, dead).await,
            };
        }
    }

    /// Produce a copy (key, payload, all headers, plus the reason) to the dead-letter topic,
    /// retrying until it is delivered: the record's offset is not committed before.
    async fn dead_letter(&self, record: &BorrowedMessage<'_>, dead: DeadLetter) {
        let mut headers = record.headers().map(|h| h.detach()).unwrap_or_default();
        dead.annotate(&mut headers);
        loop {
            let mut copy = FutureRecord::to(&self.dead_letter_topic).headers(headers.clone());
            if let Some(payload) = record.payload() {
                copy = copy.payload(payload);
            }
            if let Some(key) = record.key() {
                copy = copy.key(key);
            }
            match self.producer.send(copy, Duration::from_secs(5)).await {
                Ok(_) => break,
                Err((error, _)) => {
                    tracing::warn!(%error, topic = %self.dead_letter_topic, "dead-letter copy not delivered; retrying");
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
        }
        self.stats.dead_lettered(dead.reason());
        tracing::debug!(queue = self.gate.queue(), "{dead}");
    }
}
