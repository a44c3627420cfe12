//! Hop outcomes captured per test, for the tests of an app that uses hopbudget.
//!
//! Every hop the server layers (and queue gates) serve is a `tracing` span named `hop` whose
//! `deadline.outcome` field is recorded when the hop ends. [`HopCapture`] is a `tracing`
//! layer that keeps those ends, so a test can assert "the hop for `/orders` ended
//! `cancelled`" without installing a global metrics recorder (which installs once per
//! process) and without parsing `/metrics` text. [`HopCapture::wait_for`] waits for a hop to
//! end: an answer reaches the client before the hop that sent it has finished (the body is
//! still being polled, a cancelled handler is still being dropped), so reading at once races.
//!
//! [`HopCapture::install`] makes the capture the default subscriber *of the current thread*:
//! that covers `#[tokio::test]`, whose runtime runs the app's server task, the client and the
//! test on one thread. On a multi-thread runtime compose [`HopCapture`] into the subscriber
//! the app's tasks run under instead (it is a `tracing_subscriber::Layer`), or install it
//! with `tracing::subscriber::set_global_default` in a test binary of its own.
//!
//! # Examples
//!
//! ```
//! use hopbudget_testkit::hops::HopCapture;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let hops = HopCapture::new();
//! let _guard = hops.install();
//! // ... start the app on 127.0.0.1:0 and call it; here, a hop span by hand:
//! let span = tracing::info_span!(
//!     "hop",
//!     service.name = "orders",
//!     otel.name = "/orders",
//!     deadline.remaining_ms = 250_i64,
//!     deadline.source = "relative-ms",
//!     deadline.outcome = tracing::field::Empty,
//! );
//! span.record("deadline.outcome", "completed");
//! let hop = hops.wait_for(|h| h.route == "/orders").await;
//! assert_eq!((hop.service.as_str(), hop.outcome.as_str()), ("orders", "completed"));
//! assert_eq!(hop.remaining_ms, Some(250));
//! assert_eq!(hops.outcomes("/orders"), ["completed"]);
//! # }
//! ```

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// One hop that ended, as its span recorded it.
///
/// See the [module example](self).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HopRecord {
    /// The service (`service.name`).
    pub service: String,
    /// The route label (`otel.name`): a matched route pattern, a gRPC method, a queue name.
    pub route: String,
    /// `completed`, `refused`, `expired` or `cancelled` (`deadline.outcome`).
    pub outcome: String,
    /// The budget at arrival, in ms (`deadline.remaining_ms`).
    pub remaining_ms: Option<i64>,
    /// Where the budget came from: a carrier's name, or `fallback` (`deadline.source`).
    pub source: String,
    /// What a refused hop needed, in ms (`deadline.required_ms`); also what a hop let
    /// through with enforcement off would have needed.
    pub required_ms: Option<i64>,
    /// With enforcement off (the profile's `enforce: false`, rule C24), what enforcement
    /// would have done to this hop: `refused`, `expired` or `malformed`
    /// (`deadline.unenforced`). Empty when it was enforced, or would have been let through.
    pub unenforced: String,
}

/// Captures the end of every hop span; clones share what was captured.
///
/// See the [module example](self).
#[derive(Clone, Debug, Default)]
pub struct HopCapture {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    ended: Mutex<Vec<HopRecord>>,
    changed: tokio::sync::Notify,
}

impl HopCapture {
    /// An empty capture.
    ///
    /// See the [module example](self).
    pub fn new() -> Self {
        Self::default()
    }

    /// Make a registry with this capture the current thread's default subscriber until the
    /// guard is dropped.
    ///
    /// See the [module example](self).
    #[must_use = "the capture is uninstalled when the guard is dropped"]
    pub fn install(&self) -> tracing::subscriber::DefaultGuard {
        keep_callsites_open();
        tracing::subscriber::set_default(tracing_subscriber::registry().with(self.clone()))
    }

    /// Every hop that has ended so far, in the order they ended.
    ///
    /// See the [module example](self).
    pub fn hops(&self) -> Vec<HopRecord> {
        self.ended().clone()
    }

    /// The outcomes of the hops on `route` so far, in the order they ended.
    ///
    /// See the [module example](self).
    pub fn outcomes(&self, route: &str) -> Vec<String> {
        self.ended()
            .iter()
            .filter(|h| h.route == route)
            .map(|h| h.outcome.clone())
            .collect()
    }

    /// Wait until a hop that `matches` has ended, and return the first such. Bound the wait
    /// with `tokio::time::timeout` in a test.
    ///
    /// See the [module example](self).
    pub async fn wait_for(&self, matches: impl Fn(&HopRecord) -> bool) -> HopRecord {
        loop {
            // Registered before looking, so an end recorded between the look and the wait
            // still wakes this waiter.
            let changed = self.inner.changed.notified();
            if let Some(hop) = self.ended().iter().find(|h| matches(h)) {
                return hop.clone();
            }
            changed.await;
        }
    }

    fn ended(&self) -> MutexGuard<'_, Vec<HopRecord>> {
        // A test that panicked while holding the lock must not hide what was captured.
        self.inner
            .ended
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// `tracing` caches whether a callsite is wanted once, process-wide. While at most one
/// dispatcher exists it asks only the subscriber of the thread that reaches the callsite
/// first: a parallel test with no subscriber then caches "never" for the `hop` span, and
/// this thread's capture sees nothing (a known `tracing-core` behaviour, 0.1.36). A second
/// dispatcher kept alive for the process makes `tracing` ask every live dispatcher instead,
/// so a capture installed on any thread is always asked. It is nobody's default, so it
/// receives nothing.
fn keep_callsites_open() {
    static SECOND: std::sync::OnceLock<tracing::Dispatch> = std::sync::OnceLock::new();
    SECOND.get_or_init(|| tracing::Dispatch::new(tracing_subscriber::registry()));
}

/// What a hop span said at its start, kept in the span's extensions until it ends.
#[derive(Debug, Default)]
struct Pending(HopRecord);

impl Visit for Pending {
    fn record_i64(&mut self, field: &Field, value: i64) {
        match field.name() {
            "deadline.remaining_ms" => self.0.remaining_ms = Some(value),
            "deadline.required_ms" => self.0.required_ms = Some(value),
            _ => {}
        }
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.record_i64(field, i64::try_from(value).unwrap_or(i64::MAX));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        let slot = match field.name() {
            "service.name" => &mut self.0.service,
            "otel.name" => &mut self.0.route,
            "deadline.outcome" => &mut self.0.outcome,
            "deadline.source" => &mut self.0.source,
            "deadline.unenforced" => &mut self.0.unenforced,
            _ => return,
        };
        *slot = value.to_owned();
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        // `%value` fields (the layers' service and route) arrive as Debug of a Display.
        self.record_str(field, format!("{value:?}").trim_matches('"'));
    }
}

impl<S> Layer<S> for HopCapture
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().name() != "hop" {
            return;
        }
        let mut pending = Pending::default();
        attrs.record(&mut pending);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(pending);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut extensions = span.extensions_mut();
        let Some(pending) = extensions.get_mut::<Pending>() else {
            return;
        };
        let had_outcome = !pending.0.outcome.is_empty();
        values.record(pending);
        // The outcome is recorded once, when the hop ends, after the refusal's
        // `deadline.required_ms`.
        if !had_outcome && !pending.0.outcome.is_empty() {
            let hop = pending.0.clone();
            drop(extensions);
            self.ended().push(hop);
            self.inner.changed.notify_waiters();
        }
    }
}
