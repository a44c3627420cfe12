//! Scenario S10 on NATS JetStream: a backlog in which half the messages' deadlines lapsed
//! while they waited. The gated consumer drops those before any work (dead-lettering them with
//! their headers) and processes the rest; a consumer that processes everything is run on the
//! same backlog for comparison. Prints a table of drain times and rates.
//!
//! Needs a NATS server with JetStream (`nats-server -js`) at `NATS_URL`, default
//! `127.0.0.1:4222`. Run:
//!
//! ```text
//! cargo run -p hopbudget-examples --example queue_nats -- [MESSAGES] [WORK_MS]
//! ```
//!
//! (defaults: 10000 messages, 1 ms of work each, 32 handled at once).

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull, stream};
use hopbudget::queue::Gate;
use hopbudget::queue::nats::{Consumer, Publisher};
use hopbudget::{Profile, RequestBudget};

const CONCURRENCY: usize = 32;
const SHORT: Duration = Duration::from_millis(200);
const LONG: Duration = Duration::from_secs(600);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(10_000);
    let work = Duration::from_millis(args.next().map(|a| a.parse()).transpose()?.unwrap_or(1));
    let url = std::env::var("NATS_URL").unwrap_or_else(|_| "127.0.0.1:4222".into());
    let client = async_nats::connect(&url).await.map_err(|e| {
        format!("NATS is not reachable at {url} ({e}); start `nats-server -js` or set NATS_URL")
    })?;
    let js = jetstream::new(client);

    let gated = Profile::default().with_service("billing");
    // "Process everything": a skew allowance of a day keeps every message live.
    let everything = Profile::from_yaml(
        "service: billing\nqueue:\n  skew_allowance_ms: 86400000\n",
        "everything.yaml",
    )?;

    println!("| consumer | messages | processed | dead-lettered | drain time | drain rate |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (label, consumer_profile) in [
        ("gated (hopbudget)", &gated),
        ("processes every message", &everything),
    ] {
        let run = Run::create(&js, label).await?;
        run.publish_backlog(&gated, n).await?;
        // Let the short deadlines lapse (plus the skew allowance) while nobody consumes.
        tokio::time::sleep(SHORT + Duration::from_millis(150)).await;
        let (elapsed, processed, dead) = run.drain(consumer_profile, n, work).await?;
        println!(
            "| {label} | {n} | {processed} | {dead} | {:.2} s | {:.0} msg/s |",
            elapsed.as_secs_f64(),
            n as f64 / elapsed.as_secs_f64()
        );
        run.delete(&js).await;
    }
    println!(
        "\nhalf the messages had {} ms budgets that lapsed in the backlog; work {} ms per message, {CONCURRENCY} at once",
        SHORT.as_millis(),
        work.as_millis()
    );
    Ok(())
}

/// One backlog: a work stream and its dead-letter stream, named for this run.
struct Run {
    js: jetstream::Context,
    name: String,
    subject: String,
    dead_name: String,
    dead_subject: String,
}

impl Run {
    async fn create(
        js: &jetstream::Context,
        label: &str,
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let tag = format!(
            "HB_EXAMPLE_{}_{}_{}",
            std::process::id(),
            label.len(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_millis()
        );
        let run = Self {
            js: js.clone(),
            subject: format!("{}.work", tag.to_lowercase()),
            dead_subject: format!("{}.dead", tag.to_lowercase()),
            dead_name: format!("{tag}_DLQ"),
            name: tag,
        };
        for (name, subject) in [
            (&run.name, &run.subject),
            (&run.dead_name, &run.dead_subject),
        ] {
            js.create_stream(stream::Config {
                name: name.clone(),
                subjects: vec![subject.clone()],
                ..Default::default()
            })
            .await?;
        }
        Ok(run)
    }

    async fn publish_backlog(
        &self,
        profile: &Profile,
        n: usize,
    ) -> Result<(), Box<dyn std::error::Error>> {
        let publisher = Publisher::new(self.js.clone(), profile);
        let mut acks = Vec::with_capacity(512);
        for id in 0..n {
            let budget =
                RequestBudget::local(if id % 2 == 0 { SHORT } else { LONG }, profile.policy());
            let send = publisher.send(
                self.subject.clone(),
                async_nats::HeaderMap::new(),
                id.to_string().into(),
            );
            acks.push(budget.scope(send).await?.1);
            if acks.len() == 512 {
                for ack in acks.drain(..) {
                    ack.await?;
                }
            }
        }
        for ack in acks {
            ack.await?;
        }
        Ok(())
    }

    async fn drain(
        &self,
        profile: &Profile,
        n: usize,
        work: Duration,
    ) -> Result<(Duration, u64, u64), Box<dyn std::error::Error>> {
        let pull = self
            .js
            .get_stream(&self.name)
            .await?
            .create_consumer(pull::Config {
                durable_name: Some("worker".into()),
                max_ack_pending: 1_024,
                ..Default::default()
            })
            .await?;
        let consumer = Consumer::new(
            Gate::new(profile, "orders"),
            self.js.clone(),
            self.dead_subject.clone(),
        )
        .with_concurrency(CONCURRENCY);
        let started = Instant::now();
        let handler = |_m: async_nats::Message| async move {
            tokio::time::sleep(work).await; // charge the card
            Ok::<(), std::convert::Infallible>(())
        };
        let run = consumer.run(pull, handler);
        let done = async {
            loop {
                let s = consumer.stats();
                if (s.processed + s.dead_lettered()) as usize >= n {
                    return started.elapsed();
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        };
        let elapsed = tokio::select! {
            r = run => return Err(format!("consumer stopped: {r:?}").into()),
            elapsed = done => elapsed,
        };
        let s = consumer.stats();
        Ok((elapsed, s.processed, s.dead_lettered()))
    }

    async fn delete(self, js: &jetstream::Context) {
        let _ = js.delete_stream(&self.name).await;
        let _ = js.delete_stream(&self.dead_name).await;
    }
}
