//! The consumer's gate: before any work, decide what a message's deadline allows.
//!
//! The gate is the queue boundary's hop lifecycle. *Admission* reads the deadline header
//! with the injected wall clock (read once, rule C1), allows the profile's skew, and says
//! malformed, expired, refused or admitted; no work and no span happen before it. An admitted
//! message gets a [`RequestBudget`] and a [`Hop`] span ([`Protocol::Queue`]), owned by
//! [`Admitted`], which runs the work inside both and records the outcome exactly once, even
//! when the consumer drops the work half-way (that is a cancellation, rule C5, and the
//! message is not acknowledged, so the broker redelivers it).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use super::dead_letter::DeadLetter;
use super::{HeaderCarrier, trace_link};
use crate::clock::{SystemClock, WallClock};
use crate::codec::{Carrier, InvalidValue, epoch};
use crate::observe::{self, Hop, HopLabels, Protocol};
use crate::status::Outcome;
use crate::{BudgetError, Deadline, HopPolicy, Profile, Refused, RequestBudget, Source};

/// Checks each consumed message's deadline before any work (rule C11, scenario S10).
///
/// Built from a profile: header name and skew allowance from its `queue:` section, the edge
/// total for messages without a deadline (rule C8), its refuse threshold as the least budget
/// worth starting with (rule C3) and its maximum as the largest budget a message's work may
/// have. The wall clock is injectable so expiry can be tested to the millisecond.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::collections::HashMap;
/// use std::sync::Arc;
/// use hopbudget::clock::SkewedClock;
/// use hopbudget::queue::{Decision, Gate, Processed, Reason};
/// use hopbudget::Profile;
///
/// let profile = Profile::default().with_service("billing");
/// let clock = Arc::new(SkewedClock::new(0));
/// let gate = Gate::new(&profile, "orders").with_clock(clock.clone());
///
/// // A message whose deadline passed an hour ago is never processed.
/// let mut stale = HashMap::new();
/// let an_hour_ago = hopbudget::clock::WallClock::now_unix_ms(&*clock) - 3_600_000;
/// stale.insert("deadline-epoch-ms".to_owned(), an_hour_ago.to_string());
/// match gate.check(&stale) {
///     Decision::Expired(dead) => assert_eq!(dead.reason(), Reason::Expired),
///     other => panic!("{other:?}"),
/// }
///
/// // A message without a deadline runs under the profile's edge total (C8).
/// match gate.check(&HashMap::<String, String>::new()) {
///     Decision::Live(admitted) => {
///         let charged = admitted.run(async { "card charged" }).await;
///         assert!(matches!(charged, Processed::Completed("card charged")));
///     }
///     other => panic!("{other:?}"),
/// }
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Gate {
    labels: HopLabels,
    queue: Arc<str>,
    header: Arc<str>,
    skew: Duration,
    edge_total: Duration,
    max_processing: Duration,
    min_budget: Duration,
    policy: HopPolicy,
    clock: Arc<dyn WallClock>,
}

/// What the gate decided for one message.
#[derive(Debug)]
#[must_use = "a message's decision says whether to process it or dead-letter it"]
pub enum Decision {
    /// The deadline leaves time: run the work with [`Admitted::run`].
    Live(Admitted),
    /// The deadline (plus skew allowance) had passed: acknowledge, dead-letter, never process.
    Expired(DeadLetter),
    /// Too little budget left to start the work (rule C3): acknowledge and dead-letter.
    Refused(DeadLetter),
    /// The deadline header could not be read (rule C9): acknowledge, dead-letter, go on.
    Malformed(DeadLetter),
}

impl Decision {
    /// The admitted message, or the dead letter to republish instead.
    pub fn into_result(self) -> Result<Admitted, DeadLetter> {
        match self {
            Decision::Live(admitted) => Ok(admitted),
            Decision::Expired(dead) | Decision::Refused(dead) | Decision::Malformed(dead) => {
                Err(dead)
            }
        }
    }
}

/// What the headers say, before any span or budget exists: the part of the hop lifecycle
/// every protocol shares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Admission {
    Malformed(InvalidValue),
    Expired { late_by: Duration },
    Admitted { budget: Duration, source: Source },
}

impl Gate {
    /// A gate for messages consumed from `queue` (a stream, topic or subject name; used as the
    /// metrics' `queue` label and the hop span's name, so keep it low in cardinality).
    pub fn new(profile: &Profile, queue: impl Into<Arc<str>>) -> Self {
        let queue = queue.into();
        let (header, _, skew) = profile.queue();
        let service: Arc<str> = profile.service().into();
        Self {
            labels: HopLabels::for_route(&service, &queue, Protocol::Queue)
                .with_low_budget(profile.low_budget()),
            queue,
            header: header.into(),
            skew,
            edge_total: profile.edge_total(),
            max_processing: profile.max(),
            min_budget: profile.policy().refuse_below,
            policy: profile.policy(),
            clock: Arc::new(SystemClock),
        }
    }

    /// Read the wall clock from `clock` instead of the system's.
    pub fn with_clock(mut self, clock: Arc<dyn WallClock>) -> Self {
        self.clock = clock;
        self
    }

    /// The most budget a message's work gets, however far away its deadline (default: the
    /// profile's `max_ms`). A message stamped with hours left still runs under this.
    pub fn with_max_processing(mut self, max: Duration) -> Self {
        self.max_processing = max;
        self
    }

    /// The least budget worth starting the work with (default: the profile's
    /// `refuse_below_ms`). A message with less is dead-lettered as refused (rule C3).
    pub fn with_min_budget(mut self, min: Duration) -> Self {
        self.min_budget = min;
        self
    }

    /// The queue name this gate labels its hops and counters with.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// Decide what to do with a message, from its headers, before any work.
    ///
    /// Every decision is counted: an expired message in `hopbudget_queue_expired_total` and
    /// as a hop ending `expired`, a refusal as a hop ending `refused`, a malformed header in
    /// `hopbudget_malformed_headers_total`, a missing one as a missing deadline (rule C8).
    pub fn check<C: HeaderCarrier + ?Sized>(&self, headers: &C) -> Decision {
        match self.admission(headers) {
            Admission::Malformed(reason) => {
                observe::malformed_header(&self.labels, &self.header);
                Decision::Malformed(DeadLetter::malformed(&self.header, &reason))
            }
            Admission::Expired { late_by } => {
                let budget =
                    RequestBudget::from_carrier(Carrier::Queue, Duration::ZERO, self.policy);
                budget.expire();
                let hop = Hop::start(&self.labels, &budget);
                trace_link::link(hop.span(), headers);
                hop.finish(Outcome::Expired);
                observe::queue_expired(&self.labels.service, &self.queue);
                Decision::Expired(DeadLetter::expired_before_work(late_by))
            }
            Admission::Admitted { budget, source } => {
                let budget = budget.min(self.max_processing);
                let budget = match source {
                    Source::Carrier(carrier) => {
                        RequestBudget::from_carrier(carrier, budget, self.policy)
                    }
                    other => RequestBudget::new(Deadline::after(budget), other, self.policy),
                };
                let hop = Hop::start(&self.labels, &budget);
                trace_link::link(hop.span(), headers);
                let remaining = budget.at_arrival();
                if remaining < self.min_budget {
                    hop.refuse(self.min_budget);
                    return Decision::Refused(DeadLetter::refused(Refused::new(
                        self.min_budget,
                        remaining,
                    )));
                }
                Decision::Live(Admitted {
                    budget,
                    hop: Some(hop),
                })
            }
        }
    }

    /// Read the deadline header. The skew allowance is given to the message: it is expired
    /// only once this clock is past `deadline + skew`, and until then its budget is
    /// `deadline + skew - now`. A consumer whose clock runs up to `skew` ahead therefore never
    /// drops a live message; one with a true clock gives the work up to `skew` more.
    fn admission<C: HeaderCarrier + ?Sized>(&self, headers: &C) -> Admission {
        let Some(value) = headers.get(&self.header) else {
            return Admission::Admitted {
                budget: self.edge_total,
                source: Source::Fallback,
            };
        };
        // Decoding against an epoch of 0 yields the deadline itself, in ms since the epoch.
        let deadline_ms = match epoch::decode(value, 0) {
            Ok(at) => u64::try_from(at.as_millis()).unwrap_or(u64::MAX),
            Err(reason) => return Admission::Malformed(reason),
        };
        let skew_ms = u64::try_from(self.skew.as_millis()).unwrap_or(u64::MAX);
        let now = self.clock.now_unix_ms().saturating_sub(skew_ms);
        if deadline_ms <= now {
            Admission::Expired {
                late_by: Duration::from_millis(now - deadline_ms),
            }
        } else {
            Admission::Admitted {
                budget: Duration::from_millis(deadline_ms - now),
                source: Source::Carrier(Carrier::Queue),
            }
        }
    }
}

/// A message the gate let through: its budget and its hop, until the work has run.
///
/// Dropping it without [`run`](Self::run) (or dropping `run`'s future half-way) cancels the
/// budget and records the hop as cancelled (rule C5); the consumer does not acknowledge the
/// message, so the broker delivers it again, under the same deadline.
#[derive(Debug)]
pub struct Admitted {
    budget: RequestBudget,
    hop: Option<Hop>,
}

/// How the work of an admitted message ended.
#[derive(Debug)]
#[must_use = "an expired message must be dead-lettered, a cancelled one left unacknowledged"]
pub enum Processed<T> {
    /// The work finished in time, with this output: acknowledge.
    Completed(T),
    /// The deadline passed while the work ran; the work was stopped (rule C7). Acknowledge and
    /// dead-letter it.
    Expired(DeadLetter),
    /// The budget was cancelled (the consumer is shutting down): do not acknowledge.
    Cancelled,
}

impl Admitted {
    /// The message's budget: clamped to the gate's maximum processing budget.
    pub fn budget(&self) -> &RequestBudget {
        &self.budget
    }

    /// Run the message's work under its budget: inside its task-local scope (so it propagates
    /// onward like any request's, rule C11) and the hop's span, stopped at the deadline.
    pub async fn run<F: Future>(mut self, work: F) -> Processed<F::Output> {
        let budget = self.budget.clone();
        let span = match &self.hop {
            Some(hop) => hop.span().clone(),
            None => tracing::Span::none(),
        };
        let result = budget.run(work).instrument(span).await;
        let hop = self.hop.take();
        let (outcome, processed) = match result {
            Ok(out) => (Outcome::Completed, Processed::Completed(out)),
            Err(BudgetError::Expired) => (
                Outcome::Expired,
                Processed::Expired(DeadLetter::expired_during_work(budget.at_arrival())),
            ),
            Err(_) => (Outcome::Cancelled, Processed::Cancelled),
        };
        if let Some(hop) = hop {
            hop.finish(outcome);
        }
        processed
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if let Some(hop) = self.hop.take() {
            // Unfinished: the consumer stopped. Cancel the tree first so no child outlives it
            // (C5); dropping the hop then records it as cancelled.
            self.budget.cancel();
            drop(hop);
        }
    }
}
