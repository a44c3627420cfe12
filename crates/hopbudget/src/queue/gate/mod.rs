//! The consumer's gate: before any work, decide what a message's deadline allows.
//!
//! The gate is the queue consumer's adapter over the shared [hop lifecycle](crate::hop). It
//! owns only what is particular to a queue: reading the absolute `deadline-epoch-ms` header with
//! the injected wall clock (read once, rule [C1](crate::contract#c1)) and the profile's skew
//! allowance, clamping to the maximum processing budget, and spelling each verdict as
//! ack-and-process or dead-letter. Admission (malformed, expired, refused or admitted, with the
//! `Hop` recorded and counted) and the guard that owns an admitted message's budget and span and
//! records exactly one outcome are the lifecycle's, as for an HTTP request or a gRPC call. A
//! consumer that drops the work half-way cancels it (rule [C5](crate::contract#c5)); the message is
//! not acknowledged, so the broker delivers it again.

use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;

use super::dead_letter::DeadLetter;
use super::{HeaderCarrier, trace_link};
use crate::clock::{SystemClock, WallClock};
use crate::codec::{Carrier, Inbound, MalformedHeader, epoch};
use crate::hop::{HopConfig, RouteLabel, Verdict};
use crate::observe::{self, Protocol};

mod admitted;

use crate::{error::Refused, profile::shared::SharedProfile};
pub(super) use admitted::run_guarded;
pub use admitted::{Admitted, Processed};

/// Checks each consumed message's deadline before any work (rule [C11](crate::contract#c11),
/// scenario [S10](crate::contract#s10)).
///
/// Built from a profile: header name and skew allowance from its `queue:` section, the edge total
/// for messages without a deadline (rule [C8](crate::contract#c8)), its refuse threshold as the
/// least budget worth starting with (rule [C3](crate::contract#c3)) and its maximum as the largest
/// budget a message's work may have. The wall clock is injectable so expiry can be tested to the
/// millisecond.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::collections::HashMap;
/// use std::sync::Arc;
/// use hopbudget::clock::SystemClock;
/// use hopbudget::queue::{Decision, Gate, Processed, Reason};
/// use hopbudget::Profile;
///
/// let profile = Profile::default().with_service("billing");
/// let clock = Arc::new(SystemClock); // or a clock of your own (`clock::WallClock`)
/// let gate = Gate::new(&profile, "orders").with_wall_clock(clock.clone());
/// assert_eq!(gate.queue(), "orders");
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
    config: Arc<HopConfig>,
    queue: Arc<str>,
    header: HeaderName,
    skew: Duration,
    max_processing: Duration,
    min_budget: Duration,
    clock: Arc<dyn WallClock>,
}

/// What the gate decided for one message.
///
/// Match on it as the [`Gate` example](Gate#examples) does, or split it with
/// [`into_result`](Self::into_result).
///
/// # Examples
///
/// A report needs 2 s of budget to be worth starting; a message without a deadline gets the
/// profile's edge total (1 s by default), so it is refused and dead-lettered.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::collections::HashMap;
/// use std::time::Duration;
/// use hopbudget::queue::{Decision, Gate, Reason};
/// use hopbudget::Profile;
///
/// let gate = Gate::new(&Profile::default(), "reports").with_min_budget(Duration::from_secs(2));
/// let decision = gate.check(&HashMap::<String, String>::new());
/// assert!(matches!(decision, Decision::Refused(_)));
/// match decision.into_result() {
///     Ok(admitted) => {
///         let _ = admitted.run(async { /* build the report */ }).await;
///     }
///     Err(dead) => assert_eq!(dead.reason(), Reason::Refused),
/// }
/// # }
/// ```
#[derive(Debug)]
#[must_use = "a message's decision says whether to process it or dead-letter it"]
pub enum Decision {
    /// The deadline leaves time: run the work with [`Admitted::run`].
    Live(Admitted),
    /// The deadline (plus skew allowance) had passed: acknowledge, dead-letter, never process.
    Expired(DeadLetter),
    /// Too little budget left to start the work (rule [C3](crate::contract#c3)): acknowledge and
    /// dead-letter.
    Refused(DeadLetter),
    /// The deadline header could not be read (rule [C9](crate::contract#c9)): acknowledge,
    /// dead-letter, go on.
    Malformed(DeadLetter),
}

impl Decision {
    /// The admitted message, or the dead letter to republish instead.
    ///
    /// See the [example](Decision#examples).
    pub fn into_result(self) -> Result<Admitted, DeadLetter> {
        match self {
            Decision::Live(admitted) => Ok(admitted),
            Decision::Expired(dead) | Decision::Refused(dead) | Decision::Malformed(dead) => {
                Err(dead)
            }
        }
    }
}

impl Gate {
    /// A gate for messages consumed from `queue` (a stream, topic or subject name; used as the
    /// metrics' `queue` label and the hop span's name, so keep it low in cardinality).
    ///
    /// See the [example](Self#examples).
    ///
    /// `profile` is a `&Profile`, or a `&SharedProfile` whose replacements and kill switch (rule
    /// [C24](crate::contract#c24)) the gate follows message by message. The deadline header, the
    /// skew allowance, the longest processing time and the least budget are read when the gate is
    /// built.
    pub fn new(profile: impl Into<SharedProfile>, queue: impl Into<Arc<str>>) -> Self {
        let shared = profile.into();
        let profile = shared.current();
        let (header, _, skew) = profile.queue();
        Self {
            config: Arc::new(HopConfig::new(shared.clone(), Protocol::Queue)),
            queue: queue.into(),
            // The profile checked it is a valid header name (C15).
            header: HeaderName::from_bytes(header.as_bytes()).unwrap_or(HeaderName::from_static(
                crate::codec::QUEUE_DEADLINE_EPOCH_MS,
            )),
            skew,
            max_processing: profile.max(),
            min_budget: profile.policy().refuse_below,
            clock: Arc::new(SystemClock),
        }
    }

    /// Read the wall clock from `clock` instead of the system's.
    ///
    /// See the [example](Self#examples).
    pub fn with_wall_clock(mut self, clock: Arc<dyn WallClock>) -> Self {
        self.clock = clock;
        self
    }

    /// The most budget a message's work gets, however far away its deadline (default, and
    /// at most: the profile's `max_ms`). A message stamped with hours left still runs under
    /// this.
    ///
    /// See the example on [`Admitted`].
    pub fn with_max_processing(mut self, max: Duration) -> Self {
        self.max_processing = max;
        self
    }

    /// The least budget worth starting the work with. The profile's `refuse_below_ms` always
    /// applies (the lifecycle refuses below it); this can only raise it. A message with less
    /// is dead-lettered as refused (rule [C3](crate::contract#c3)).
    ///
    /// See the example on [`Decision`].
    pub fn with_min_budget(mut self, min: Duration) -> Self {
        self.min_budget = min;
        self
    }

    /// The queue name this gate labels its hops and counters with.
    ///
    /// See the [example](Self#examples).
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// Decide what to do with a message, from its headers, before any work.
    ///
    /// Every decision is counted: an expired message in `hopbudget_queue_expired_total` and as a
    /// hop ending `expired`, a refusal as a hop ending `refused`, a malformed header in
    /// `hopbudget_malformed_headers_total`, a missing one as a missing deadline (rule
    /// [C8](crate::contract#c8)).
    ///
    /// The work's budget is never later than the stamped deadline. The skew allowance only widens
    /// the *expiry* decision: a message whose deadline passed less than the allowance ago by this
    /// consumer's clock may not have expired by the producer's, so it is not counted as expired;
    /// but no budget is left to work with, so it is refused (rule [C3](crate::contract#c3)) and
    /// dead-lettered as `refused`.
    ///
    /// See the [example](Self#examples).
    pub fn check<C: HeaderCarrier + ?Sized>(&self, headers: &C) -> Decision {
        let (inbound, late_by) = match self.read(headers) {
            Read::InSkew { late_by } => {
                let required = self.least_budget();
                let policy = self.config.profile().policy();
                let nothing_left = crate::budget::RequestBudget::from_carrier(
                    Carrier::Queue,
                    Duration::ZERO,
                    policy,
                );
                if !policy.enforce {
                    // Unenforced (C24): the work runs, and its hop says it would have expired.
                    let verdict = self
                        .config
                        .admit_budget(nothing_left, RouteLabel::Known(&self.queue));
                    return self.decide(verdict, headers, || {
                        DeadLetter::within_skew(late_by, self.skew)
                    });
                }
                self.config.turn_away(
                    &nothing_left,
                    RouteLabel::Known(&self.queue),
                    Some(required),
                );
                return Decision::Refused(DeadLetter::within_skew(late_by, self.skew));
            }
            Read::Inbound(inbound, late_by) => (inbound, late_by),
        };
        let verdict = self
            .config
            .admit_inbound(inbound, RouteLabel::Known(&self.queue));
        self.decide(verdict, headers, || {
            DeadLetter::expired_before_work(late_by)
        })
    }

    /// Decide again on a message whose earlier attempt failed, under `first`, the budget it was
    /// first admitted with ([`Admitted::budget`]): rule [C6](crate::contract#c6), a retry spends
    /// what is left of the same budget, never a fresh one. A message without a deadline header is
    /// not given a new edge total on each attempt, so a handler that keeps failing cannot hold it
    /// (and, on Kafka, its partition) forever.
    ///
    /// When what is left is below the least budget worth starting with, the message ran out
    /// of time during its retries: it is `expired` (hop and dead letter), not `refused`.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// use std::collections::HashMap;
    /// use std::time::Duration;
    /// use hopbudget::queue::{Decision, Gate, Processed, Reason};
    /// use hopbudget::Profile;
    ///
    /// let gate = Gate::new(&Profile::default(), "orders"); // edge total: 1 s
    /// let unstamped = HashMap::<String, String>::new();
    /// let admitted = gate.check(&unstamped).into_result().unwrap();
    /// let first = admitted.budget().clone();
    /// let failed = admitted.run(async { Err::<(), _>("card service down") }).await;
    /// assert!(matches!(failed, Processed::Completed(Err(_))));
    ///
    /// // 600 ms later, the retry has what is left of the first second.
    /// tokio::time::advance(Duration::from_millis(600)).await;
    /// let retry = gate.check_retry(&unstamped, &first).into_result().unwrap();
    /// assert_eq!(retry.budget().at_arrival(), Duration::from_millis(400));
    /// drop(retry);
    ///
    /// // Once it has run out, the message is dead-lettered as expired.
    /// tokio::time::advance(Duration::from_millis(400)).await;
    /// match gate.check_retry(&unstamped, &first) {
    ///     Decision::Expired(dead) => assert_eq!(dead.reason(), Reason::Expired),
    ///     other => panic!("{other:?}"),
    /// }
    /// # }
    /// ```
    pub fn check_retry<C: HeaderCarrier + ?Sized>(
        &self,
        headers: &C,
        first: &crate::budget::RequestBudget,
    ) -> Decision {
        let budget = crate::budget::RequestBudget::new(
            first.deadline(),
            first.source(),
            self.config.profile().policy(),
        );
        let left = budget.at_arrival();
        let started_with = first.at_arrival();
        if left < self.least_budget() && budget.is_enforced() {
            self.config
                .turn_away(&budget, RouteLabel::Known(&self.queue), None);
            observe::queue_expired(self.config.service(), &self.queue);
            return Decision::Expired(DeadLetter::expired_during_retries(started_with, left));
        }
        let verdict = self
            .config
            .admit_budget(budget, RouteLabel::Known(&self.queue));
        self.decide(verdict, headers, || {
            DeadLetter::expired_during_retries(started_with, Duration::ZERO)
        })
    }

    /// The least budget a message's work starts with: the gate's own minimum, at least the
    /// profile's refuse threshold.
    fn least_budget(&self) -> Duration {
        self.min_budget
            .max(self.config.profile().policy().refuse_below)
    }

    /// Spell the lifecycle's verdict as a queue decision.
    fn decide<C: HeaderCarrier + ?Sized>(
        &self,
        verdict: Verdict,
        headers: &C,
        expired: impl FnOnce() -> DeadLetter,
    ) -> Decision {
        match verdict {
            Verdict::Malformed(malformed) => Decision::Malformed(DeadLetter::malformed(
                malformed.header().as_str(),
                &malformed.reason(),
            )),
            Verdict::Expired => {
                observe::queue_expired(self.config.service(), &self.queue);
                Decision::Expired(expired())
            }
            Verdict::Refused(refused) => Decision::Refused(DeadLetter::refused(refused)),
            Verdict::Admitted(mut guard) => {
                let arrived = guard.budget().at_arrival();
                if arrived < self.min_budget {
                    let refused = Refused::new(self.min_budget, arrived);
                    guard.answered_refused(refused);
                    guard.finish();
                    return Decision::Refused(DeadLetter::refused(refused));
                }
                guard.enter(|| trace_link::link(&tracing::Span::current(), headers));
                Decision::Live(Admitted { guard })
            }
        }
    }

    /// Read the deadline header into the lifecycle's terms, reading the wall clock once.
    ///
    /// The budget is what is left until the stamped deadline by this clock, never more: the
    /// skew allowance is not added to it, so nothing the work calls is told a deadline later
    /// than the user's (#32). The allowance only decides whether a message whose deadline
    /// has passed is counted as expired (passed by at least the allowance) or as inside it.
    fn read<C: HeaderCarrier + ?Sized>(&self, headers: &C) -> Read {
        let Some(value) = headers.get(self.header.as_str()) else {
            return Read::Inbound(Ok(None), Duration::ZERO);
        };
        // Decoding against an epoch of 0 yields the deadline itself, in ms since the epoch.
        let deadline_ms = match epoch::decode(value, 0) {
            Ok(at) => u64::try_from(at.as_millis()).unwrap_or(u64::MAX),
            Err(reason) => {
                return Read::Inbound(
                    Err(MalformedHeader::new(self.header.clone(), reason)),
                    Duration::ZERO,
                );
            }
        };
        let now = self.clock.now_unix_ms();
        let late_by = Duration::from_millis(now.saturating_sub(deadline_ms));
        if now >= deadline_ms && late_by < self.skew {
            return Read::InSkew { late_by };
        }
        let left = Duration::from_millis(deadline_ms.saturating_sub(now));
        let max = self.max_processing.min(self.config.profile().max());
        let inbound = Inbound {
            carrier: Carrier::Queue,
            budget: left.min(max),
            clamped: left > max,
        };
        Read::Inbound(Ok(Some(inbound)), late_by)
    }
}

/// What the deadline header says, before the lifecycle decides.
enum Read {
    /// For the lifecycle: no header, a malformed one, or the budget left (zero when expired),
    /// with how long ago an expired deadline passed.
    Inbound(Result<Option<Inbound>, MalformedHeader>, Duration),
    /// The deadline passed by this clock, but less than the skew allowance ago.
    InSkew {
        /// How long ago, by this clock.
        late_by: Duration,
    },
}
