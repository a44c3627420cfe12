use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, AckKind, consumer::PullConsumer};
use futures_util::StreamExt;

use crate::queue::stats::Counts;
use crate::queue::{ConsumerStats, DeadLetter, Gate, Processed};

/// Messages being turned away (copied to the dead-letter subject) at once, beyond the work
/// slots.
const DEAD_LETTERS_IN_FLIGHT: usize = 64;

/// Pause before retrying a message whose handler failed.
const RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

/// A JetStream pull-consumer loop with the deadline [`Gate`] before any work.
///
/// See the [module docs](super) for what happens to each kind of message, and the
/// [module example](super#examples) for the producer's side.
///
/// # Examples
///
/// A consumer with eight handlers, its counts read from a clone, and a fetch loop of your
/// own through [`handle`](Self::handle). It needs a live server, so it is only compiled
/// (`no_run`).
///
/// ```no_run
/// # async fn charge(_order: &[u8]) -> Result<(), std::io::Error> { Ok(()) }
/// # async fn demo() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// use std::time::Duration;
/// use async_nats::jetstream::{self, consumer::pull, stream};
/// use futures_util::StreamExt;
/// use hopbudget::queue::nats::Consumer;
/// use hopbudget::queue::Gate;
/// use hopbudget::Profile;
///
/// let profile = Profile::default().with_service("billing");
/// let js = jetstream::new(async_nats::connect("127.0.0.1:4222").await?);
/// // A stream captures the dead-letter subject, so a copy is stored before the original
/// // is acknowledged.
/// js.get_or_create_stream(stream::Config {
///     name: "DEAD".into(),
///     subjects: vec!["dead.>".into()],
///     ..Default::default()
/// })
/// .await?;
/// let orders = js.get_stream("ORDERS").await?;
/// let pull = orders
///     .get_or_create_consumer("billing", pull::Config {
///         durable_name: Some("billing".into()),
///         ..Default::default()
///     })
///     .await?;
///
/// let consumer = Consumer::new(Gate::new(&profile, "orders"), js, "dead.orders")
///     .with_concurrency(8);
/// let counts = consumer.clone(); // clones share the counts
/// let worker = tokio::spawn(async move {
///     consumer
///         .run(pull, |message: async_nats::Message| async move {
///             // `Err` retries the message while its first budget lasts.
///             charge(&message.payload).await
///         })
///         .await
/// });
/// tokio::time::sleep(Duration::from_secs(60)).await;
/// let stats = counts.stats();
/// println!("{} processed, {} dead-lettered", stats.processed, stats.dead_lettered());
/// worker.abort();
///
/// // Or fetch batches yourself and hand each message over.
/// let manual = orders
///     .get_or_create_consumer("billing-batch", pull::Config {
///         durable_name: Some("billing-batch".into()),
///         ..Default::default()
///     })
///     .await?;
/// let mut batch = manual.fetch().max_messages(10).messages().await?;
/// let handler = |message: async_nats::Message| async move { charge(&message.payload).await };
/// while let Some(message) = batch.next().await {
///     counts.handle(message?, &handler).await;
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Consumer {
    gate: Gate,
    js: jetstream::Context,
    dead_letter_subject: Arc<str>,
    concurrency: usize,
    stats: Arc<Counts>,
}

/// The consumer could not start reading.
///
/// Returned by [`Consumer::run`]; see the [example](Consumer#examples).
#[derive(Debug, thiserror::Error)]
#[error("cannot read messages from the JetStream consumer: {0}")]
pub struct ConsumeError(#[from] async_nats::jetstream::consumer::StreamError);

impl Consumer {
    /// A consumer checking messages with `gate` and republishing the ones it will not process
    /// to `dead_letter_subject` through `js` (a subject a stream captures, so the copy is
    /// stored before the original is acknowledged).
    ///
    /// See the [example](Self#examples).
    pub fn new(
        gate: Gate,
        js: jetstream::Context,
        dead_letter_subject: impl Into<Arc<str>>,
    ) -> Self {
        Self {
            gate,
            js,
            dead_letter_subject: dead_letter_subject.into(),
            concurrency: 1,
            stats: Arc::default(),
        }
    }

    /// Run up to `n` handlers at once (default 1). Messages turned away take no handler slot:
    /// up to 64 more are dead-lettered meanwhile. Live messages take slots in the order they
    /// arrive.
    ///
    /// See the [example](Self#examples).
    pub fn with_concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Counts so far; clones of this consumer share them.
    ///
    /// See the [example](Self#examples).
    pub fn stats(&self) -> ConsumerStats {
        self.stats.snapshot()
    }

    /// Consume until the subscription ends or this future is dropped. `handler` gets each live
    /// message and runs inside its budget's scope and hop span; `Ok` acknowledges it, `Err`
    /// (logged) retries it under the budget it was first admitted with, until that runs out
    /// and the message is dead-lettered as expired (rule [C6](crate::contract#c6)).
    ///
    /// See the [example](Self#examples).
    pub async fn run<H, Fut, E>(
        &self,
        consumer: PullConsumer,
        handler: H,
    ) -> Result<(), ConsumeError>
    where
        H: Fn(async_nats::Message) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: Display,
    {
        let messages = consumer.messages().await?;
        // Work slots bound the handlers; turning a message away takes no slot, so an expired
        // backlog is dead-lettered alongside the work instead of queueing behind it.
        let slots = tokio::sync::Semaphore::new(self.concurrency);
        messages
            .for_each_concurrent(self.concurrency + DEAD_LETTERS_IN_FLIGHT, |message| async {
                match message {
                    Ok(message) => self.handle_in(message, &handler, &slots).await,
                    // Heartbeat and connection hiccups: the stream carries on after them.
                    Err(error) => tracing::warn!(%error, queue = self.gate.queue(), "JetStream consumer error"),
                }
            })
            .await;
        Ok(())
    }

    /// One message: the gate, then the handler or the dead-letter subject.
    ///
    /// See the [example](Self#examples).
    pub async fn handle<H, Fut, E>(&self, message: jetstream::Message, handler: &H)
    where
        H: Fn(async_nats::Message) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: Display,
    {
        let slot = tokio::sync::Semaphore::new(1);
        self.handle_in(message, handler, &slot).await
    }

    /// The gate first; a live message then waits for a work slot with its deadline running:
    /// one that expires while waiting is dead-lettered as expired before any work.
    ///
    /// A handler error retries the message here, under the budget it was first admitted with
    /// (rule [C6](crate::contract#c6)), not by a nak: a redelivered message without a deadline header would get a
    /// fresh edge total from the gate each time and could come back forever (#32). The work
    /// slot is given back during the pause, and the broker is told the message is still in
    /// progress so its ack wait does not redeliver it meanwhile.
    async fn handle_in<H, Fut, E>(
        &self,
        message: jetstream::Message,
        handler: &H,
        slots: &tokio::sync::Semaphore,
    ) where
        H: Fn(async_nats::Message) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: Display,
    {
        static NO_HEADERS: std::sync::OnceLock<HeaderMap> = std::sync::OnceLock::new();
        let headers = message
            .headers
            .as_ref()
            .unwrap_or_else(|| NO_HEADERS.get_or_init(HeaderMap::new));
        let mut admitted = match self.gate.check(headers).into_result() {
            Ok(admitted) => admitted,
            Err(dead) => return self.dead_letter(&message, dead).await,
        };
        let first = admitted.budget().clone();
        loop {
            // Waiting for a slot is bounded by the deadline: once it ends, `run` below starts
            // no work and reports how (expired before work, or cancelled).
            let slot = tokio::select! {
                slot = slots.acquire() => match slot {
                    Ok(slot) => Some(slot),
                    // The semaphore lives as long as the loop and is never closed.
                    Err(_) => return,
                },
                _ = admitted.budget().done() => None,
            };
            let processed = admitted.run(handler(message.message.clone())).await;
            drop(slot);
            match processed {
                Processed::Completed(Ok(())) => {
                    self.stats.processed();
                    if let Err(error) = message.ack().await {
                        tracing::warn!(%error, "acknowledging a processed message failed; it may be redelivered");
                    }
                    return;
                }
                Processed::Completed(Err(error)) => {
                    self.stats.failed();
                    tracing::warn!(%error, queue = self.gate.queue(), "handler failed; retrying while the deadline allows");
                }
                Processed::Expired(dead) => return self.dead_letter(&message, dead).await,
                // Stopping: leave it unacknowledged, the broker delivers it again (C5).
                Processed::Cancelled => return,
            }
            if let Err(error) = message.ack_with(AckKind::Progress).await {
                tracing::warn!(%error, "marking a message in progress failed; it may be redelivered after the ack wait");
            }
            // No pause past the deadline: the retry check after it dead-letters the message.
            tokio::time::sleep(RETRY_PAUSE.min(first.deadline().remaining())).await;
            admitted = match self.gate.check_retry(headers, &first).into_result() {
                Ok(admitted) => admitted,
                Err(dead) => return self.dead_letter(&message, dead).await,
            };
        }
    }

    /// Copy the message, all headers and payload, plus the reason, to the dead-letter subject;
    /// acknowledge the original only once the copy is stored.
    async fn dead_letter(&self, message: &jetstream::Message, dead: DeadLetter) {
        let mut headers = message.headers.clone().unwrap_or_default();
        dead.annotate(&mut headers);
        let stored = match self
            .js
            .publish_with_headers(
                self.dead_letter_subject.to_string(),
                headers,
                message.payload.clone(),
            )
            .await
        {
            Ok(ack) => ack.await.map(drop),
            Err(error) => Err(error),
        };
        if let Err(error) = stored {
            tracing::warn!(%error, subject = %self.dead_letter_subject, "dead-letter copy not stored; message naked for redelivery");
            let _ = message.ack_with(AckKind::Nak(None)).await;
            return;
        }
        self.stats.dead_lettered(dead.reason());
        tracing::debug!(queue = self.gate.queue(), "{dead}");
        if let Err(error) = message.ack().await {
            tracing::warn!(%error, "acknowledging a dead-lettered message failed; it may be dead-lettered twice");
        }
    }
}
