//! The background queue of scenario S11: after a successful answer a service hands the
//! order-confirmation e-mail over an in-process queue; workers consume it.
//!
//! The message carries its deadline the way a broker message would, as an absolute
//! `deadline-epoch-ms` header (a message may wait longer than any clock skew), stamped by
//! the producer from a budget rooted when the work was scheduled, *not* from the request's
//! (C12): the e-mail is not cancelled when the response goes out. The consumer checks the
//! deadline before any work and drops a message that waited past it (S10). How each side
//! behaves per mode lives in [`super::wiring`] (`hand_off`, `consume`). The queue is in
//! process by default so the demo needs nothing installed; with `--broker nats://HOST:PORT`
//! ([`use_broker`]) each message travels through a NATS JetStream stream instead, its
//! deadline in the message headers, and the workers consume it from there.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http::HeaderMap;
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;

use super::collector::Collector;
use super::topology::BackgroundSpec;
use super::wiring::{self, Mode};

/// One queued message.
#[derive(Debug)]
pub struct Job {
    /// The request that scheduled it.
    pub id: u64,
    /// Message headers (the deadline carrier, in propagated mode).
    pub headers: HeaderMap,
    /// How long the work takes.
    pub work: Duration,
    /// When it was scheduled.
    pub scheduled: Instant,
}

/// The producer side of one service's background queue.
pub type Producer = mpsc::UnboundedSender<Job>;

/// The broker chosen with `--broker`, for every queue this process starts. A process-wide
/// setting so that the runner and `serve` need not change to carry it.
static BROKER: OnceLock<String> = OnceLock::new();

/// Send background work through NATS JetStream at `url` (`nats://HOST:PORT`) instead of the
/// in-process queue. Checks now, before any service starts, that the server answers and has
/// JetStream.
pub fn use_broker(url: &str) -> Result<(), String> {
    let address = url
        .strip_prefix("nats://")
        .ok_or_else(|| format!("--broker `{url}`: only nats://HOST:PORT is supported"))?
        .to_owned();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start tokio: {e}"))?;
    rt.block_on(async {
        let client = async_nats::connect(&address).await.map_err(|e| {
            format!("--broker {url}: cannot connect ({e}); start `nats-server -js`")
        })?;
        if client.server_info().jetstream {
            Ok(())
        } else {
            Err(format!(
                "--broker {url}: JetStream is not enabled; start the server with `-js`"
            ))
        }
    })?;
    BROKER
        .set(address)
        .map_err(|_| "--broker given twice".to_owned())
}

/// Start the workers of a background queue; returns the producer side.
pub fn start(spec: &BackgroundSpec, mode: Mode, collector: Arc<Collector>) -> Producer {
    if let Some(address) = BROKER.get() {
        return over_nats(address.clone(), spec, mode, collector);
    }
    let (tx, mut rx) = mpsc::unbounded_channel::<Job>();
    let slots = Arc::new(Semaphore::new(spec.workers as usize));
    tokio::spawn(async move {
        while let Some(job) = rx.recv().await {
            let Ok(permit) = slots.clone().acquire_owned().await else {
                return;
            };
            let collector = collector.clone();
            tokio::spawn(async move {
                let outcome = wiring::consume(mode, &job).await;
                collector.background_done(job.id, outcome);
                drop(permit);
            });
        }
    });
    tx
}

/// Header carrying the demo's request id across the broker.
const ID_HEADER: &str = "demo-request-id";
/// Header carrying how long the work takes, in microseconds.
const WORK_HEADER: &str = "demo-work-us";

/// The same queue through a JetStream stream: jobs are published with their headers (the
/// `deadline-epoch-ms` stamp among them) and consumed by `workers` handlers at once, each
/// acknowledged once handled. The stream lives in memory and expires after ten minutes, so
/// demo runs leave nothing behind.
fn over_nats(
    address: String,
    spec: &BackgroundSpec,
    mode: Mode,
    collector: Arc<Collector>,
) -> Producer {
    static N: AtomicU32 = AtomicU32::new(0);
    let (tx, mut rx) = mpsc::unbounded_channel::<Job>();
    let workers = spec.workers.max(1) as usize;
    let name = format!(
        "HOPBUDGET_DEMO_{}_{}_{}",
        spec.name
            .replace(|c: char| !c.is_ascii_alphanumeric(), "_")
            .to_uppercase(),
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let subject = format!("hopbudget.demo.{}", name.to_lowercase());
    tokio::spawn(async move {
        let js = match connect(&address, &name, &subject).await {
            Ok(js) => js,
            Err(e) => {
                eprintln!("background queue over NATS not started: {e}");
                return;
            }
        };
        tokio::spawn(consume(js.clone(), name, workers, mode, collector));
        while let Some(job) = rx.recv().await {
            let mut headers = async_nats::HeaderMap::new();
            for (k, v) in &job.headers {
                if let Ok(v) = v.to_str() {
                    headers.insert(k.as_str(), v);
                }
            }
            headers.insert(ID_HEADER, job.id.to_string());
            headers.insert(WORK_HEADER, job.work.as_micros().to_string());
            if let Err(e) = js
                .publish_with_headers(subject.clone(), headers, Default::default())
                .await
            {
                eprintln!("background job {} not published: {e}", job.id);
            }
        }
    });
    tx
}

async fn connect(
    address: &str,
    name: &str,
    subject: &str,
) -> Result<async_nats::jetstream::Context, String> {
    use async_nats::jetstream::stream;
    let client = async_nats::connect(address)
        .await
        .map_err(|e| e.to_string())?;
    let js = async_nats::jetstream::new(client);
    js.create_stream(stream::Config {
        name: name.to_owned(),
        subjects: vec![subject.to_owned()],
        storage: stream::StorageType::Memory,
        max_age: Duration::from_secs(600),
        ..Default::default()
    })
    .await
    .map_err(|e| e.to_string())?;
    Ok(js)
}

async fn consume(
    js: async_nats::jetstream::Context,
    name: String,
    workers: usize,
    mode: Mode,
    collector: Arc<Collector>,
) {
    use async_nats::jetstream::consumer::pull;
    use futures_util::StreamExt;
    let messages = async {
        js.get_stream(&name)
            .await
            .map_err(|e| e.to_string())?
            .create_consumer(pull::Config {
                durable_name: Some("workers".into()),
                ..Default::default()
            })
            .await
            .map_err(|e| e.to_string())?
            .messages()
            .await
            .map_err(|e| e.to_string())
    };
    let messages = match messages.await {
        Ok(m) => m,
        Err(e) => {
            eprintln!("background queue over NATS: no consumer: {e}");
            return;
        }
    };
    messages
        .for_each_concurrent(workers, |message| {
            let collector = collector.clone();
            async move {
                let Ok(message) = message else { return };
                let job = job_from(&message);
                let outcome = wiring::consume(mode, &job).await;
                collector.background_done(job.id, outcome);
                let _ = message.ack().await;
            }
        })
        .await;
}

/// Rebuild a job from a consumed message's headers.
fn job_from(message: &async_nats::jetstream::Message) -> Job {
    let mut headers = HeaderMap::new();
    let mut id = 0;
    let mut work = Duration::ZERO;
    if let Some(h) = &message.headers {
        for (k, values) in h.iter() {
            let Some(v) = values.first() else { continue };
            match AsRef::<str>::as_ref(k) {
                ID_HEADER => id = v.as_str().parse().unwrap_or(0),
                WORK_HEADER => work = Duration::from_micros(v.as_str().parse().unwrap_or(0)),
                name => {
                    if let (Ok(k), Ok(v)) = (
                        http::HeaderName::from_bytes(name.as_bytes()),
                        http::HeaderValue::from_str(v.as_str()),
                    ) {
                        headers.insert(k, v);
                    }
                }
            }
        }
    }
    Job {
        id,
        headers,
        work,
        scheduled: Instant::now(),
    }
}
