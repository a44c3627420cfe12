//! A real NATS server with JetStream for the queue tests: `NATS_URL`, default
//! `127.0.0.1:4222`. Each test makes streams with names unique to its run, so reruns never
//! see old messages, and deletes them when it is done.
#![allow(dead_code, unreachable_pub)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::{self, consumer::PullConsumer, consumer::pull, stream};

/// Where the server is.
pub fn nats_url() -> String {
    std::env::var("NATS_URL").unwrap_or_else(|_| "127.0.0.1:4222".to_owned())
}

/// Connect, or say what to start: `None` when the server is missing, and the test, which needs
/// it, returns at once; under `HOPBUDGET_REQUIRE_SERVICES=1` (CI) a missing server fails the
/// test instead (`support/services.rs`). The queue boundary is only tested against a real
/// broker.
pub async fn connect() -> Option<async_nats::Client> {
    let url = nats_url();
    match async_nats::ConnectOptions::new()
        .connection_timeout(Duration::from_secs(5))
        .connect(&url)
        .await
    {
        Ok(client) => Some(client),
        Err(e) => {
            crate::services_support::skip_or_fail(&format!(
                "NATS is not reachable at {url} ({e}). Start a server with JetStream \
                 (`nats-server -js`) or set NATS_URL to one."
            ));
            None
        }
    }
}

/// A name unique to this test run: process id, time, and a counter.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() % 1_000_000_000_000)
        .unwrap_or(0);
    format!(
        "{prefix}_{}_{nanos}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A work stream and its dead-letter stream, unique to one test.
pub struct Streams {
    pub js: jetstream::Context,
    pub name: String,
    pub subject: String,
    pub dead_name: String,
    pub dead_subject: String,
}

impl Streams {
    pub async fn create(client: &async_nats::Client, prefix: &str) -> Self {
        let js = jetstream::new(client.clone());
        let name = unique(prefix);
        let subject = format!("{}.work", name.to_lowercase());
        let dead_name = format!("{name}_DLQ");
        let dead_subject = format!("{}.dead", name.to_lowercase());
        for (stream, subject) in [(&name, &subject), (&dead_name, &dead_subject)] {
            js.create_stream(stream::Config {
                name: stream.clone(),
                subjects: vec![subject.clone()],
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| {
                panic!("creating stream {stream} failed ({e}); is JetStream enabled (`nats-server -js`)?")
            });
        }
        Self {
            js,
            name,
            subject,
            dead_name,
            dead_subject,
        }
    }

    /// The durable pull consumer on the work stream (created on first use).
    pub async fn consumer(&self, ack_wait: Duration) -> PullConsumer {
        self.js
            .get_stream(&self.name)
            .await
            .unwrap()
            .get_or_create_consumer(
                "worker",
                pull::Config {
                    durable_name: Some("worker".into()),
                    ack_wait,
                    max_ack_pending: 2_000,
                    ..Default::default()
                },
            )
            .await
            .unwrap()
    }

    /// Every message on the dead-letter stream so far.
    pub async fn dead_letters(&self) -> Vec<async_nats::Message> {
        use futures_util::StreamExt;
        let stream = self.js.get_stream(&self.dead_name).await.unwrap();
        let count = stream.cached_info().state.messages as usize;
        if count == 0 {
            return Vec::new();
        }
        let reader = stream
            .create_consumer(pull::Config {
                ack_policy: jetstream::consumer::AckPolicy::None,
                ..Default::default()
            })
            .await
            .unwrap();
        let mut messages = reader.messages().await.unwrap();
        let mut out = Vec::with_capacity(count);
        while out.len() < count {
            let m = tokio::time::timeout(Duration::from_secs(10), messages.next())
                .await
                .expect("dead-letter stream read timed out")
                .unwrap()
                .unwrap();
            out.push(m.message);
        }
        out
    }

    /// Messages not yet delivered plus delivered but unacknowledged, on the work consumer.
    pub async fn outstanding(&self) -> (u64, usize) {
        let mut consumer: PullConsumer = self
            .js
            .get_stream(&self.name)
            .await
            .unwrap()
            .get_consumer("worker")
            .await
            .unwrap();
        let info = consumer.info().await.unwrap();
        (info.num_pending, info.num_ack_pending)
    }

    pub async fn delete(self) {
        let _ = self.js.delete_stream(&self.name).await;
        let _ = self.js.delete_stream(&self.dead_name).await;
    }
}
