//! Where the sidecar's spans go (`--otlp-endpoint`, issue #45 item 3): the OpenTelemetry SDK's
//! batch span processor and `opentelemetry-otlp`'s HTTP exporter (protobuf bodies), so the
//! wire format is the SDK's, never written here.
//!
//! Three choices are the proxy's own:
//!
//! - **The HTTP client** is the hyper-util client the proxy already runs, on the proxy's own
//!   runtime ([`RuntimeClient`]): no reqwest, no TLS, no second runtime. The SDK's batch
//!   processor runs its exports on a thread of its own and waits there; the request itself
//!   is a task on the proxy's runtime.
//! - **The queue is bounded and its drops are counted.** The SDK drops a span when its queue is
//!   full and says so once; [`Bounded`] admits a span only while fewer than the queue's size
//!   are waiting, so the SDK's queue never overflows and every span the proxy gives up on is
//!   counted here: `hopbudget_proxy_spans_dropped_total{reason="queue_full"}` when the
//!   collector is slow, `{reason="export_failed"}` for a batch the collector did not take
//!   (down, refusing, timing out). The first failed export after a good one is a WARN line
//!   and the first good export after failures an INFO line, so a collector that is down
//!   writes two lines, not one per batch; a full queue is a WARN line at most every
//!   [`FULL_WARN_EVERY`].
//! - **The settings** are OpenTelemetry's own environment variables, read by the SDK:
//!   `OTEL_BSP_MAX_QUEUE_SIZE` (2048), `OTEL_BSP_SCHEDULE_DELAY` (5000 ms),
//!   `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` (512), `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT` (10 s).
//!
//! Nothing here is built without `--otlp-endpoint`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry::Context;
use opentelemetry_http::{HttpClient, HttpError};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider, Span, SpanData,
    SpanExporter, SpanProcessor,
};

/// The metric counting the spans the proxy gave up on, by `reason`.
pub(crate) const SPANS_DROPPED: &str = "hopbudget_proxy_spans_dropped_total";

/// How often at most a full queue is a WARN line: under sustained load a slow collector
/// fills it again after every export.
pub(crate) const FULL_WARN_EVERY: Duration = Duration::from_secs(10);

/// A collector's answer is read up to this size; it is an empty message when all is well.
const MAX_ANSWER: usize = 64 * 1024;

/// The exporting pipeline: a tracer provider whose spans go to the collector.
#[derive(Debug)]
pub(crate) struct Export {
    provider: SdkTracerProvider,
}

impl Export {
    /// Build the pipeline for `endpoint` (an `http://` URL, checked by the command line),
    /// naming `service` as the spans' `service.name`. A request whose caller sent a
    /// `traceparent` is sampled as the caller says; one without is sampled at
    /// `sample_ratio` (the profile's `sidecar.sample_ratio`, as for the traces the ingress
    /// starts). Must be called inside the runtime that will carry the exports.
    pub(crate) fn start(endpoint: &Uri, service: &str, sample_ratio: f64) -> Result<Self, String> {
        let client = RuntimeClient::new(tokio::runtime::Handle::current(), export_timeout());
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(endpoint.to_string())
            .with_http_client(client)
            .build()
            .map_err(|e| format!("cannot export spans to {endpoint}: {e}"))?;
        let config = BatchConfigBuilder::default().build();
        let queue = Arc::new(Queue::default());
        let capacity = config_queue_size();
        let processor = BatchSpanProcessor::new(
            Counted {
                inner: exporter,
                queue: queue.clone(),
                endpoint: endpoint.to_string(),
            },
            config,
        );
        let provider = SdkTracerProvider::builder()
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                sample_ratio,
            ))))
            .with_span_processor(Bounded {
                inner: processor,
                queue,
                capacity,
            })
            .with_resource(
                Resource::builder_empty()
                    .with_service_name(service.to_owned())
                    .build(),
            )
            .build();
        Ok(Self { provider })
    }

    /// The provider the proxy's spans are made with.
    pub(crate) fn provider(&self) -> &SdkTracerProvider {
        &self.provider
    }

    /// Send what is queued and stop. The export runs on this runtime, so the SDK's blocking
    /// wait happens on a blocking thread, never on a runtime worker.
    pub(crate) async fn shutdown(self) {
        let provider = self.provider;
        let done = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(error)) = done {
            tracing::warn!(%error, "spans could not all be sent at shutdown");
        }
    }
}

/// The exporter's timeout as the SDK reads it (`OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, else
/// `OTEL_EXPORTER_OTLP_TIMEOUT`, in ms; 10 s). The SDK bounds its retries by it but not one
/// request in flight, so [`RuntimeClient`] bounds each request by it too: a collector that
/// takes the connection and never answers would otherwise hold the export thread forever.
fn export_timeout() -> Duration {
    [
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ]
    .iter()
    .find_map(|name| std::env::var(name).ok()?.parse().ok())
    .map_or(Duration::from_secs(10), Duration::from_millis)
}

/// The queue size the SDK reads (`OTEL_BSP_MAX_QUEUE_SIZE`, default 2048), which
/// [`Bounded`] must not exceed.
fn config_queue_size() -> usize {
    std::env::var("OTEL_BSP_MAX_QUEUE_SIZE")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &usize| n > 0)
        .unwrap_or(2048)
}

/// Spans handed to the SDK's queue and not yet taken into an export.
#[derive(Debug)]
struct Queue {
    waiting: AtomicUsize,
    // Whether the last export failed, so a collector that stays down writes one WARN line.
    failing: AtomicBool,
    // When the queue was last said to be full, in ms after `since` (`u64::MAX`: never).
    full_warned: AtomicU64,
    since: Instant,
}

impl Default for Queue {
    fn default() -> Self {
        Self {
            waiting: AtomicUsize::new(0),
            failing: AtomicBool::new(false),
            full_warned: AtomicU64::new(u64::MAX),
            since: Instant::now(),
        }
    }
}

impl Queue {
    /// Whether a full queue is to be said now: the first time, then every
    /// [`FULL_WARN_EVERY`] at most.
    fn warn_full(&self) -> bool {
        let now = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        let every = FULL_WARN_EVERY.as_millis() as u64;
        self.full_warned
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
                (last == u64::MAX || now.saturating_sub(last) >= every).then_some(now)
            })
            .is_ok()
    }

    fn dropped(&self, reason: &'static str, count: usize) {
        metrics::counter!(SPANS_DROPPED, "reason" => reason).increment(count as u64);
    }
}

/// The SDK's batch processor, admitting a span only while its queue has room: every span the
/// proxy drops is dropped here, where it is counted.
#[derive(Debug)]
struct Bounded {
    inner: BatchSpanProcessor,
    queue: Arc<Queue>,
    capacity: usize,
}

impl SpanProcessor for Bounded {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        let admitted = self
            .queue
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.capacity).then_some(n + 1)
            })
            .is_ok();
        if admitted {
            self.inner.on_end(span);
        } else {
            if self.queue.warn_full() {
                tracing::warn!(
                    queue = self.capacity,
                    "span queue full: the collector is slow or down; dropping spans \
                     (counted in {SPANS_DROPPED}; said at most every {FULL_WARN_EVERY:?})"
                );
            }
            self.queue.dropped("queue_full", 1);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The OTLP exporter, counting what leaves the queue and what the collector did not take.
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    queue: Arc<Queue>,
    // Named in the WARN line: the SDK's errors do not say where they were sending.
    endpoint: String,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let count = batch.len();
        // Out of the queue: room for as many new spans.
        let _ = self
            .queue
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(count))
            });
        let result = self.inner.export(batch).await;
        match &result {
            Ok(()) => {
                if self.queue.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!("span export works again");
                }
            }
            Err(error) => {
                if !self.queue.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        %error,
                        endpoint = %self.endpoint,
                        spans = count,
                        "span export failed; dropping spans until the collector takes them \
                         (counted in {SPANS_DROPPED})"
                    );
                }
                self.queue.dropped("export_failed", count);
            }
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The exporter's HTTP client: the proxy's hyper-util client, its requests run as tasks on
/// the proxy's runtime (the SDK awaits them from its own thread).
struct RuntimeClient {
    runtime: tokio::runtime::Handle,
    client: Client<HttpConnector, Full<Bytes>>,
    timeout: Duration,
}

impl RuntimeClient {
    fn new(runtime: tokio::runtime::Handle, timeout: Duration) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Self {
            runtime,
            client,
            timeout,
        }
    }
}

impl fmt::Debug for RuntimeClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RuntimeClient").finish_non_exhaustive()
    }
}

impl HttpClient for RuntimeClient {
    fn send_bytes<'a, 'b>(
        &'a self,
        request: Request<Bytes>,
    ) -> Pin<Box<dyn Future<Output = Result<Response<Bytes>, HttpError>> + Send + 'b>>
    where
        'a: 'b,
        Self: 'b,
    {
        let client = self.client.clone();
        let timeout = self.timeout;
        let task = self.runtime.spawn(async move {
            let call = async {
                let res = client.request(request.map(Full::new)).await?;
                let (parts, body) = res.into_parts();
                let body = Limited::new(body, MAX_ANSWER)
                    .collect()
                    .await
                    .map_err(|e| -> HttpError { e })?
                    .to_bytes();
                Ok::<_, HttpError>(Response::from_parts(parts, body))
            };
            match tokio::time::timeout(timeout, call).await {
                Ok(result) => result,
                Err(_) => Err(format!("no answer from the collector within {timeout:?}").into()),
            }
        });
        Box::pin(async move {
            task.await
                .map_err(|e| -> HttpError { Box::new(e) })
                .and_then(|r| r)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_is_said_once_then_not_again_within_the_interval() {
        // A proxy that has run for a while (an Instant cannot go below the machine's boot).
        let queue = Queue {
            since: Instant::now()
                .checked_sub(FULL_WARN_EVERY * 2)
                .unwrap_or_else(Instant::now),
            ..Queue::default()
        };
        assert!(queue.warn_full());
        assert!(!queue.warn_full());
        // As if the last one was said an interval ago.
        let every = FULL_WARN_EVERY.as_millis() as u64;
        let now = queue.since.elapsed().as_millis() as u64;
        queue
            .full_warned
            .store(now.saturating_sub(every + 1), Ordering::Relaxed);
        assert!(queue.warn_full());
    }
}
