//! What the demo measures, recorded by the client and by every service of one run.
//!
//! `demo` runs every service in one process, so an in-process collector is enough: the client
//! records when each request started and when it stopped waiting (an answer or giving up);
//! each service records its arrivals (with the budget it knew of), its terminal statuses and
//! the intervals of its own work, keyed by the request id that travels in a header. Work done
//! after the client stopped waiting is work for nobody; the report sums it per mode.
//!
//! One file, though long: the records, the collector that keeps them and the guards that
//! write them (a request's hop, its queue wait, its work) are one bookkeeping, each guard
//! writing the collector's records when it drops.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopbudget::{Outcome, RequestBudget};
use tokio::time::Instant;

use super::traces;
use crate::hop_log::{LogFormat, write_line};

/// One client request as the client saw it.
#[derive(Clone, Copy, Debug)]
pub struct ClientRec {
    /// When it was sent.
    pub start: Instant,
    /// When the client stopped waiting (answer, error or giving up).
    pub end: Option<Instant>,
    /// Whether it got a successful answer.
    pub ok: bool,
    /// Whether it gave up (its timeout fired).
    pub gave_up: bool,
    /// Whether the answer was degraded (an optional call failed).
    pub degraded: bool,
    /// Whether the answer was a refusal (C3, C21): the graph said no at once instead of
    /// admitting the request.
    pub refused: bool,
}

/// One interval of a service's own work for one request.
#[derive(Clone, Copy, Debug)]
pub struct WorkRec {
    /// Request id.
    pub id: u64,
    /// Service index.
    pub service: usize,
    /// Start.
    pub start: Instant,
    /// End (completion, or the moment it was stopped).
    pub end: Instant,
}

/// One hop of one request, for the report's timeline (the trace files come from the
/// services' own spans, see [`traces`]).
#[derive(Clone, Copy, Debug)]
pub struct SpanRec {
    /// Request id.
    pub id: u64,
    /// Service index.
    pub service: usize,
    /// Arrival.
    pub start: Instant,
    /// Terminal status.
    pub end: Instant,
    /// Budget the hop read on arrival, if any (ms).
    pub remaining_ms: Option<u64>,
    /// Terminal status.
    pub outcome: Outcome,
}

/// Per-service counters.
#[derive(Clone, Debug, Default)]
pub struct HopCounts {
    /// Requests that reached the service.
    pub arrivals: u64,
    /// Budget left at arrival, ms: what the hop read (propagated), or what the client's
    /// budget implied without the hop knowing it (no propagation).
    pub budget_at_arrival_ms: Vec<i64>,
    /// Completed.
    pub completed: u64,
    /// Calls to this service refused before work (C3), as the caller saw them: by the caller
    /// before sending, by the server layer on arrival, or by the service after queueing.
    pub refused: u64,
    /// Calls to this service that ended expired, as the caller saw them: the budget ran out
    /// here or below, or (no budget) a per-hop timeout fired on this call or below it.
    pub expired: u64,
    /// The caller went away while budget remained.
    pub cancelled: u64,
    /// Other failures.
    pub failed: u64,
}

/// How one piece of background work ended (S11).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackgroundOutcome {
    /// Done within its own deadline.
    Sent,
    /// Dropped before any work: it waited in the queue past its deadline (S10).
    DroppedExpired,
    /// Its deadline passed while it ran.
    Expired,
}

/// Background work counters.
#[derive(Clone, Debug, Default)]
pub struct BackgroundCounts {
    /// Handed to the queue.
    pub scheduled: u64,
    /// Done within its deadline.
    pub sent: u64,
    /// Of those, finished after the client had its answer (so not cancelled with it).
    pub sent_after_answer: u64,
    /// Dropped before work, deadline passed in the queue.
    pub dropped_expired: u64,
    /// Expired while running.
    pub expired: u64,
}

/// What a collector does with each finished hop.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Keep {
    /// Keep every record (a demo run, which ends).
    All,
    /// Keep nothing, so a long-running `serve` does not grow; print one line per hop for
    /// services whose hops the library does not log (no server layer), named `service`.
    Nothing {
        /// Print a line per hop as `service`.
        log_as: Option<String>,
        /// How the line is written.
        format: LogFormat,
    },
}

/// Everything one run records.
#[derive(Debug)]
pub struct Collector {
    keep: Keep,
    budget: Duration,
    clients: Mutex<HashMap<u64, ClientRec>>,
    hops: Vec<Mutex<HopCounts>>,
    work: Mutex<Vec<WorkRec>>,
    spans: Mutex<Vec<SpanRec>>,
    in_flight: AtomicUsize,
    working: AtomicUsize,
    /// Hops waiting for a work slot of the service's own semaphore.
    queued: AtomicUsize,
    /// Queues the collector cannot count itself: a leaf's admission layer.
    gauges: Mutex<Vec<QueueGauge>>,
    background: Mutex<BackgroundCounts>,
}

/// A queue length the collector reads when asked (an admission layer's waiters, which wait
/// before the hop's handler, so no handler can count them).
pub struct QueueGauge(Box<dyn Fn() -> usize + Send + Sync>);

impl std::fmt::Debug for QueueGauge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QueueGauge")
    }
}

impl Collector {
    /// A collector for `services` services and a client budget.
    pub fn new(services: usize, budget: Duration) -> Self {
        Self {
            keep: Keep::All,
            budget,
            clients: Mutex::new(HashMap::new()),
            hops: (0..services)
                .map(|_| Mutex::new(HopCounts::default()))
                .collect(),
            work: Mutex::new(Vec::new()),
            spans: Mutex::new(Vec::new()),
            in_flight: AtomicUsize::new(0),
            working: AtomicUsize::new(0),
            queued: AtomicUsize::new(0),
            gauges: Mutex::new(Vec::new()),
            background: Mutex::new(BackgroundCounts::default()),
        }
    }

    /// A collector for `hopbudget-demo serve`, which runs until stopped: it keeps no records, and
    /// with `log_as` prints one line per hop (for a service whose hops the library's server
    /// layer does not log).
    pub fn for_serve(services: usize, log_as: Option<String>, format: LogFormat) -> Self {
        Self {
            keep: Keep::Nothing { log_as, format },
            ..Self::new(services, Duration::ZERO)
        }
    }

    fn keeps(&self) -> bool {
        self.keep == Keep::All
    }

    /// The client sent request `id`.
    pub fn client_start(&self, id: u64, start: Instant) {
        lock(&self.clients).insert(
            id,
            ClientRec {
                start,
                end: None,
                ok: false,
                gave_up: false,
                degraded: false,
                refused: false,
            },
        );
    }

    /// The client's request `id` was answered with a refusal.
    pub fn client_refused(&self, id: u64) {
        if let Some(rec) = lock(&self.clients).get_mut(&id) {
            rec.refused = true;
        }
    }

    /// The client stopped waiting for request `id`.
    pub fn client_end(&self, id: u64, ok: bool, gave_up: bool, degraded: bool) {
        if let Some(rec) = lock(&self.clients).get_mut(&id) {
            rec.end = Some(Instant::now());
            rec.ok = ok;
            rec.gave_up = gave_up;
            rec.degraded = degraded;
        }
    }

    /// Request `id` reached service `service`; `known` is the budget the hop read, if any.
    pub fn arrive(
        self: &Arc<Self>,
        service: usize,
        id: u64,
        known: Option<Duration>,
        budget: Option<RequestBudget>,
    ) -> HopGuard {
        let now = Instant::now();
        let left = match known {
            Some(d) => d.as_millis() as i64,
            None => match lock(&self.clients).get(&id) {
                Some(c) => self.budget.as_millis() as i64 - (now - c.start).as_millis() as i64,
                None => 0,
            },
        };
        // Request 0 is the warm-up call; it is not measured.
        if id != 0 && self.keeps() {
            let mut h = lock(&self.hops[service]);
            h.arrivals += 1;
            h.budget_at_arrival_ms.push(left);
        }
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        // A hop without hopbudget's server layer runs in the demo's own span: record on it
        // what the hop knew, in the library's field names (C14). hopbudget's own hop span
        // records these itself.
        let span = Some(tracing::Span::current()).filter(traces::is_own);
        if let Some(span) = &span {
            if let Some(d) = known {
                span.record(
                    "deadline.remaining_ms",
                    i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
                );
            }
            let source = budget.as_ref().map_or("none", |b| b.source().as_str());
            span.record("deadline.source", source);
        }
        HopGuard {
            collector: Arc::clone(self),
            service,
            id,
            start: now,
            remaining_ms: known.map(|d| d.as_millis() as u64),
            budget,
            span,
            done: false,
        }
    }

    /// A call to `service` was refused (C3): by the caller before sending, by the service's
    /// server layer on arrival, or by the service after queueing. Counted where the caller
    /// sees it, so that refusals the server layer answers before any handler are included.
    pub fn refused(&self, service: usize) {
        lock(&self.hops[service]).refused += 1;
    }

    /// A call to `service` ended expired as its caller saw it: the budget ran out at that hop
    /// or below it, or (no budget) a caller's own per-hop timeout fired.
    pub fn expired(&self, service: usize) {
        lock(&self.hops[service]).expired += 1;
    }

    /// Service `service` starts its own work for request `id`.
    pub fn work(self: &Arc<Self>, service: usize, id: u64) -> WorkGuard {
        self.working.fetch_add(1, Ordering::AcqRel);
        WorkGuard {
            collector: Arc::clone(self),
            service,
            id,
            start: Instant::now(),
        }
    }

    /// A hop starts waiting for one of its service's work slots; it stops when the guard is
    /// dropped (granted, or the hop went away).
    pub fn queue_wait(self: &Arc<Self>) -> QueueWait {
        self.queued.fetch_add(1, Ordering::AcqRel);
        QueueWait {
            collector: Arc::clone(self),
        }
    }

    /// Count `waiting` in [`queued`](Self::queued) too: a queue outside the handlers.
    pub fn watch_queue(&self, waiting: impl Fn() -> usize + Send + Sync + 'static) {
        lock(&self.gauges).push(QueueGauge(Box::new(waiting)));
    }

    /// Hops waiting for a work slot right now, at every service: the graph's queues.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
            + lock(&self.gauges).iter().map(|g| (g.0)()).sum::<usize>()
    }

    /// Background work for request `id` was handed to the queue.
    pub fn background_scheduled(&self, id: u64) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        if id != 0 && self.keeps() {
            lock(&self.background).scheduled += 1;
        }
    }

    /// Background work for request `id` ended.
    pub fn background_done(&self, id: u64, outcome: BackgroundOutcome) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        if id == 0 || !self.keeps() {
            return;
        }
        let answered = lock(&self.clients).get(&id).and_then(|c| c.end);
        let mut b = lock(&self.background);
        match outcome {
            BackgroundOutcome::Sent => {
                b.sent += 1;
                if answered.is_some_and(|end| end <= Instant::now()) {
                    b.sent_after_answer += 1;
                }
            }
            BackgroundOutcome::DroppedExpired => b.dropped_expired += 1,
            BackgroundOutcome::Expired => b.expired += 1,
        }
    }

    /// The background counters.
    pub fn background(&self) -> BackgroundCounts {
        lock(&self.background).clone()
    }

    /// Handlers still running (including detached ones and queued background work).
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Work intervals still open.
    pub fn working(&self) -> usize {
        self.working.load(Ordering::Acquire)
    }

    /// The client records.
    pub fn clients(&self) -> HashMap<u64, ClientRec> {
        lock(&self.clients).clone()
    }

    /// The per-service counters.
    pub fn hops(&self) -> Vec<HopCounts> {
        self.hops.iter().map(|h| lock(h).clone()).collect()
    }

    /// The work intervals.
    pub fn work_records(&self) -> Vec<WorkRec> {
        lock(&self.work).clone()
    }

    /// The hop spans.
    pub fn spans(&self) -> Vec<SpanRec> {
        lock(&self.spans).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic elsewhere must not hide the measurements: take the data anyway.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// An open hop; records its terminal status when finished, or on drop (the caller went away
/// or the deadline cancelled it).
#[derive(Debug)]
pub struct HopGuard {
    collector: Arc<Collector>,
    service: usize,
    id: u64,
    start: Instant,
    remaining_ms: Option<u64>,
    budget: Option<RequestBudget>,
    span: Option<tracing::Span>,
    done: bool,
}

impl HopGuard {
    /// Close the hop with its terminal status; `failed` marks an application failure.
    pub fn finish(mut self, outcome: Outcome, failed: bool) {
        self.close(outcome, failed);
    }

    fn close(&mut self, outcome: Outcome, failed: bool) {
        if self.done {
            return;
        }
        self.done = true;
        self.collector.in_flight.fetch_sub(1, Ordering::AcqRel);
        if let Some(span) = self.span.take() {
            span.record("deadline.outcome", outcome.as_str());
        }
        if let Keep::Nothing {
            log_as: Some(service),
            format,
        } = &self.collector.keep
        {
            let mut line = vec![
                ("service", service.clone()),
                ("request_id", self.id.to_string()),
                (
                    "budget_ms",
                    self.remaining_ms.map_or("none".into(), |ms| ms.to_string()),
                ),
                ("outcome", outcome.to_string()),
            ];
            if failed {
                line.push(("failed", "true".into()));
            }
            line.push((
                "took_ms",
                format!("{:.1}", self.start.elapsed().as_secs_f64() * 1000.0),
            ));
            write_line(*format, &line);
        }
        if self.id == 0 || !self.collector.keeps() {
            return;
        }
        {
            let mut h = lock(&self.collector.hops[self.service]);
            match outcome {
                Outcome::Completed if failed => h.failed += 1,
                Outcome::Completed => h.completed += 1,
                // Counted by the caller (`refused`), which sees every refusal.
                Outcome::Refused => {}
                // Counted by the caller (`expired`), as it saw the call end.
                Outcome::Expired => {}
                Outcome::Cancelled => h.cancelled += 1,
            }
        }
        lock(&self.collector.spans).push(SpanRec {
            id: self.id,
            service: self.service,
            start: self.start,
            end: Instant::now(),
            remaining_ms: self.remaining_ms,
            outcome,
        });
    }
}

impl Drop for HopGuard {
    fn drop(&mut self) {
        // Dropped unfinished: the handler future was dropped, by the server layer at the
        // deadline or because the caller went away. The budget recorded which one ended it
        // (its end cause: an expiry is never a cancellation, C4); a hop without a budget
        // (per-hop timeouts) only knows that its caller left.
        let outcome = self
            .budget
            .as_ref()
            .and_then(RequestBudget::end_cause)
            .map_or(Outcome::Cancelled, Outcome::from);
        self.close(outcome, false);
    }
}

/// A hop waiting for a work slot; see [`Collector::queue_wait`].
#[derive(Debug)]
pub struct QueueWait {
    collector: Arc<Collector>,
}

impl Drop for QueueWait {
    fn drop(&mut self) {
        self.collector.queued.fetch_sub(1, Ordering::AcqRel);
    }
}

/// An open interval of a service's own work; recorded when dropped, so work stopped by a
/// deadline or a cancellation counts up to the moment it stopped.
#[derive(Debug)]
pub struct WorkGuard {
    collector: Arc<Collector>,
    service: usize,
    id: u64,
    start: Instant,
}

impl Drop for WorkGuard {
    fn drop(&mut self) {
        self.collector.working.fetch_sub(1, Ordering::AcqRel);
        if self.id == 0 || !self.collector.keeps() {
            return;
        }
        lock(&self.collector.work).push(WorkRec {
            id: self.id,
            service: self.service,
            start: self.start,
            end: Instant::now(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hopbudget::HopPolicy;

    #[tokio::test]
    async fn a_hop_dropped_by_its_deadline_is_expired_even_with_time_left_on_the_clock() {
        // A server layer may end a budget a moment before the clock reaches it (it answers
        // early by its margin): the budget's end cause, not the clock, says expired (C4).
        let c = Arc::new(Collector::new(1, Duration::from_millis(500)));
        let budget = RequestBudget::local(Duration::from_secs(1), HopPolicy::DEFAULT);
        let guard = c.arrive(0, 1, Some(budget.remaining()), Some(budget.clone()));
        budget.expire();
        assert!(!budget.remaining().is_zero());
        drop(guard);
        let spans = c.spans();
        assert_eq!(spans[0].outcome, Outcome::Expired);
        assert_eq!(c.hops()[0].cancelled, 0);

        // The caller going away with budget left is a cancellation (C5).
        let budget = RequestBudget::local(Duration::from_secs(1), HopPolicy::DEFAULT);
        let guard = c.arrive(0, 2, Some(budget.remaining()), Some(budget.clone()));
        budget.cancel();
        drop(guard);
        assert_eq!(c.spans()[1].outcome, Outcome::Cancelled);
        assert_eq!(c.hops()[0].cancelled, 1);
    }
}
