//! The background queue over NATS JetStream (`hopbudget-demo demo --broker nats://…`).
//!
//! One stream, `HOPBUDGET_DEMO`, captures `hopbudget.demo.>`; each run publishes a service's
//! e-mails to `hopbudget.demo.<run>.<service>.mail` and reads them back through a pull
//! consumer of its own (removed by the server a minute after the run stops reading). The
//! stream keeps messages ten minutes, so demo runs leave nothing growing on the server.
//!
//! A message carries the job in its payload (`<request id> <work µs>`) and the headers the
//! mode stamped. One with a deadline header goes through hopbudget's JetStream consumer
//! ([`hopbudget::queue::nats::Consumer`]): the gate before any work, the work under the
//! remaining budget, and a message that waited past its deadline copied to the dead-letter
//! subject (`….dead`, captured by the same stream) before it is acknowledged. One without
//! (the detached and timeouts modes send none) runs as those modes run it, through
//! [`HopMode::consume`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream};
use futures_util::StreamExt;
use hopbudget::Profile;
use hopbudget::queue::Gate;
use http::HeaderMap;

use super::job::Job;
use super::producer::Publisher;
use crate::demo::collector::{BackgroundOutcome, Collector};
use crate::demo::node::HopMode;
use crate::demo::topology::BackgroundSpec;

/// The stream every demo run shares.
const STREAM: &str = "HOPBUDGET_DEMO";
/// The subjects it captures.
const SUBJECTS: &str = "hopbudget.demo.>";

/// A connection to the NATS server a demo run's background queues use.
#[derive(Clone, Debug)]
pub struct Broker {
    js: jetstream::Context,
    /// This run's part of the subject names.
    run: String,
}

impl Broker {
    /// Connect to `url` (`nats://host:port`) and make sure the demo's stream exists.
    pub async fn connect(url: &str) -> Result<Self, String> {
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(Duration::from_secs(5))
            .connect(url)
            .await
            .map_err(|e| {
                format!(
                    "--broker {url}: cannot connect to NATS ({e}); start a server with \
                     JetStream (`nats-server -js`), or leave --broker out to use the \
                     in-process queue"
                )
            })?;
        let js = jetstream::new(client);
        js.get_or_create_stream(stream::Config {
            name: STREAM.into(),
            subjects: vec![SUBJECTS.into()],
            max_age: Duration::from_secs(600),
            ..Default::default()
        })
        .await
        .map_err(|e| {
            format!(
                "--broker {url}: cannot create the JetStream stream {STREAM} ({e}); is \
                 JetStream enabled (`nats-server -js`)?"
            )
        })?;
        Ok(Self {
            js,
            run: run_name(),
        })
    }

    /// Start the workers of `service`'s background queue on the broker; returns the producer
    /// side.
    pub async fn start(
        &self,
        service: &str,
        spec: &BackgroundSpec,
        mode: Arc<dyn HopMode>,
        collector: Arc<Collector>,
        profile: &Profile,
    ) -> Result<Publisher, String> {
        let base = format!("hopbudget.demo.{}.{}", self.run, subject_token(service));
        let subject = format!("{base}.mail");
        let consumer = self
            .js
            .get_stream(STREAM)
            .await
            .map_err(|e| format!("NATS stream {STREAM}: {e}"))?
            .create_consumer(pull::Config {
                name: Some(format!("{}-{}", self.run, subject_token(service))),
                filter_subject: subject.clone(),
                inactive_threshold: Duration::from_secs(60),
                ..Default::default()
            })
            .await
            .map_err(|e| format!("NATS consumer for {service}'s background queue: {e}"))?;
        let gated = hopbudget::queue::nats::Consumer::new(
            Gate::new(profile, spec.name.clone()),
            self.js.clone(),
            format!("{base}.dead"),
        );
        let workers = spec.workers as usize;
        let messages = consumer
            .messages()
            .await
            .map_err(|e| format!("NATS consumer for {service}'s background queue: {e}"))?;
        let (deadline_header, _, _) = profile.queue();
        let deadline_header: Arc<str> = deadline_header.into();
        let reader_collector = collector.clone();
        tokio::spawn(async move {
            messages
                .for_each_concurrent(workers, |message| {
                    let (gated, mode) = (gated.clone(), mode.clone());
                    let (collector, deadline_header) =
                        (reader_collector.clone(), deadline_header.clone());
                    async move {
                        match message {
                            Ok(message) => {
                                consume(message, &gated, &*mode, &collector, &deadline_header).await
                            }
                            Err(e) => tracing::warn!(error = %e, "demo background queue: NATS"),
                        }
                    }
                })
                .await;
        });
        Ok(Publisher {
            js: self.js.clone(),
            subject: subject.into(),
            collector,
        })
    }
}

/// A name for this run's subjects and consumers, unique on the server: process id and time.
fn run_name() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("r{}-{nanos}", std::process::id())
}

/// Subject tokens may not hold `.`, `*`, `>` or white space.
fn subject_token(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Read the job back from a message: `<request id> <work µs>`.
fn job_of(message: &async_nats::Message) -> Option<Job> {
    let text = std::str::from_utf8(&message.payload).ok()?;
    let (id, work) = text.split_once(' ')?;
    let mut headers = HeaderMap::new();
    if let Some(h) = &message.headers {
        for (name, values) in h.iter() {
            let (Ok(name), Some(value)) = (
                http::HeaderName::from_bytes(AsRef::<[u8]>::as_ref(name)),
                values
                    .first()
                    .and_then(|v| http::HeaderValue::from_str(v.as_str()).ok()),
            ) else {
                continue;
            };
            headers.insert(name, value);
        }
    }
    Some(Job {
        id: id.parse().ok()?,
        headers,
        work: Duration::from_micros(work.parse().ok()?),
        scheduled: tokio::time::Instant::now(),
    })
}

/// Where the gated handler got to with one message.
const NOT_STARTED: u8 = 0;
const STARTED: u8 = 1;
const DONE: u8 = 2;

/// Consume one message and record how its e-mail ended.
async fn consume(
    message: jetstream::Message,
    gated: &hopbudget::queue::nats::Consumer,
    mode: &dyn HopMode,
    collector: &Collector,
    deadline_header: &str,
) {
    let Some(job) = job_of(&message.message) else {
        tracing::warn!(subject = %message.subject, "demo background message unreadable; acknowledged and skipped");
        let _ = message.ack().await;
        return;
    };
    let stamped = message
        .headers
        .as_ref()
        .is_some_and(|h| h.get(deadline_header).is_some());
    if !stamped {
        // The detached and timeouts modes send no deadline: the work runs as they run it.
        let outcome = mode.consume(&job).await;
        collector.background_done(job.id, outcome);
        if let Err(e) = message.ack().await {
            tracing::warn!(error = %e, "demo background message not acknowledged");
        }
        return;
    }
    // The gate decides before any work; the handler runs only for a live message, under its
    // remaining budget, and is dropped at the deadline.
    let state = Arc::new(AtomicU8::new(NOT_STARTED));
    let work = job.work;
    let handler = {
        let state = state.clone();
        move |_: async_nats::Message| {
            let state = state.clone();
            async move {
                state.store(STARTED, Ordering::Relaxed);
                tokio::time::sleep(work).await;
                state.store(DONE, Ordering::Relaxed);
                Ok::<(), std::convert::Infallible>(())
            }
        }
    };
    gated.handle(message, &handler).await;
    let outcome = match state.load(Ordering::Relaxed) {
        DONE => BackgroundOutcome::Sent,
        STARTED => BackgroundOutcome::Expired,
        // Turned away by the gate: dead-lettered, never worked on (S10).
        _ => BackgroundOutcome::DroppedExpired,
    };
    collector.background_done(job.id, outcome);
}
