//! The producer's side: write the deadline onto a message before it is published.
//!
//! A publish is one more hop (rule [C11](crate::contract#c11)), so it is stamped like any outbound call: the current
//! request's forward budget (remaining less hop margin and transit allowance, rule [C2](crate::contract#c2)), but
//! as an *absolute* instant, `deadline-epoch-ms`, because a message can wait in a backlog far
//! longer than any clock skew. Beside it goes the budget the producing request started with
//! (`deadline-origin-ms`), so a consumer can tell a message that started short from one that
//! waited. Outside any request the profile's edge total is used, as for any outbound call
//! (rule [C8](crate::contract#c8)): a stamped message is never unbounded. A budget too small for the next hop
//! refuses the publish (rule [C3](crate::contract#c3)), so a message that could never be processed is not sent.

use std::sync::Arc;

use super::HeaderCarrier;
use super::trace_link;
use crate::clock::{SystemClock, WallClock};
use crate::codec::Carrier;
use crate::{budget::RequestBudget, budget::Source, error::BudgetError, profile::Profile};

/// What a [`Stamper`] wrote on a message.
///
/// See the example on [`Stamper`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// The deadline, Unix epoch milliseconds (rounded down).
    pub deadline_epoch_ms: u64,
    /// The budget the producing request started with, milliseconds.
    pub origin_ms: u64,
    /// Where the budget came from: the ambient request's source, or `fallback` ([C8](crate::contract#c8)).
    pub source: Source,
}

/// Which deadline a published message carries (rule [C12](crate::contract#c12)): the request's, or one of its own.
///
/// The default is [`Inherit`](Self::Inherit): a message is one more hop of the request that
/// publishes it (rule [C11](crate::contract#c11)), right for a job whose result the caller waits for. An event that
/// must outlive the request (an order placed, an e-mail to send) takes
/// [`Own`](Self::Own): a deadline rooted at publish time, so a consumer outage longer than
/// the request's budget does not dead-letter every event. The message's trace still links
/// back to the request. Publishing inside `request.detach(budget).scope(..)` stamps the same
/// deadline; `Own` says so where the publisher is built, once for every publish.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::collections::HashMap;
/// use std::time::Duration;
/// use hopbudget::queue::{EventDeadline, Stamper};
/// use hopbudget::{Profile, RequestBudget, Source};
///
/// let profile = Profile::default();
/// let request = RequestBudget::local(Duration::from_millis(300), profile.policy());
///
/// // Default: the request's deadline (300 ms less the 6 ms reserve, C2).
/// let job = Stamper::new(&profile);
/// assert_eq!(job.deadline(), EventDeadline::Inherit);
/// let mut headers = HashMap::new();
/// let stamp = request.scope(async { job.stamp(&mut headers) }).await.unwrap();
/// assert_eq!(stamp.origin_ms, 300);
///
/// // An event with ten minutes of its own, from publish time.
/// let event = Stamper::new(&profile).with_deadline(EventDeadline::Own(Duration::from_secs(600)));
/// let mut headers = HashMap::new();
/// let stamp = request.scope(async { event.stamp(&mut headers) }).await.unwrap();
/// assert_eq!(stamp.origin_ms, 600_000);
/// assert_eq!(stamp.source, Source::Detached);
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventDeadline {
    /// The publishing request's remaining budget, less the hop margin (rule [C2](crate::contract#c2)); outside any
    /// request, the profile's edge total (rule [C8](crate::contract#c8)).
    #[default]
    Inherit,
    /// A budget of its own, rooted when the message is published, inside a request or not
    /// (rule [C12](crate::contract#c12)). It is never cancelled with the request.
    Own(std::time::Duration),
}

/// Stamps outgoing messages with their deadline, from the current request budget.
///
/// Which deadline is a choice ([`EventDeadline`], default: the request's); the
/// NATS and Kafka publishers take a stamper through `with_stamper`.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::collections::HashMap;
/// use std::sync::Arc;
/// use std::time::Duration;
/// use hopbudget::clock::SystemClock;
/// use hopbudget::queue::Stamper;
/// use hopbudget::{Profile, RequestBudget, Source};
///
/// let profile = Profile::default();
/// let clock = Arc::new(SystemClock); // or a clock of your own (`clock::WallClock`)
/// let stamper = Stamper::new(&profile).with_wall_clock(clock);
/// assert_eq!(stamper.headers(), ("deadline-epoch-ms", "deadline-origin-ms"));
/// let request = RequestBudget::local(Duration::from_millis(500), profile.policy());
/// let mut headers = HashMap::<String, String>::new();
/// let stamp = request.scope(async { stamper.stamp(&mut headers) }).await.unwrap();
/// // The origin is the budget the request started with; the deadline is 500 ms less the
/// // 5 ms margin and 1 ms transit allowance from now (C2).
/// assert_eq!(headers["deadline-origin-ms"], "500");
/// assert_eq!(stamp.origin_ms, 500);
/// assert!(stamp.deadline_epoch_ms > 0);
/// assert_eq!(stamp.source, Source::Local);
///
/// // The same from an explicit budget, outside its scope.
/// let mut other = HashMap::<String, String>::new();
/// let again = stamper.stamp_with(&request, &mut other).unwrap();
/// assert_eq!(again.origin_ms, 500);
///
/// // Outside any request: the profile's edge total (C8).
/// let edge = stamper.stamp(&mut HashMap::<String, String>::new()).unwrap();
/// assert_eq!(edge.source, Source::Fallback);
///
/// // A budget too small for the next hop publishes nothing (C3).
/// let short = RequestBudget::local(Duration::from_millis(3), profile.policy());
/// let mut none = HashMap::<String, String>::new();
/// assert!(stamper.stamp_with(&short, &mut none).is_err());
/// assert!(none.is_empty());
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Stamper {
    deadline_header: Arc<str>,
    origin_header: Arc<str>,
    profile: Profile,
    clock: Arc<dyn WallClock>,
    deadline: EventDeadline,
}

impl Stamper {
    /// A stamper using `profile`'s queue header names, hop policy and edge total, and the
    /// system wall clock.
    ///
    /// See the [example](Self#examples).
    pub fn new(profile: &Profile) -> Self {
        let (deadline, origin, _) = profile.queue();
        Self {
            deadline_header: deadline.into(),
            origin_header: origin.into(),
            profile: profile.clone(),
            clock: Arc::new(SystemClock),
            deadline: EventDeadline::Inherit,
        }
    }

    /// Which deadline the messages carry: the request's ([`EventDeadline::Inherit`], the
    /// default) or one of their own rooted at publish time ([`EventDeadline::Own`], rule [C12](crate::contract#c12)).
    ///
    /// See the example on [`EventDeadline`].
    pub fn with_deadline(mut self, deadline: EventDeadline) -> Self {
        self.deadline = deadline;
        self
    }

    /// The deadline choice this stamper makes.
    ///
    /// See the example on [`EventDeadline`].
    pub fn deadline(&self) -> EventDeadline {
        self.deadline
    }

    /// Read the wall clock from `clock` (tests, skew scenarios).
    ///
    /// See the [example](Self#examples).
    pub fn with_wall_clock(mut self, clock: Arc<dyn WallClock>) -> Self {
        self.clock = clock;
        self
    }

    /// Stamp `headers` from the ambient request budget ([`RequestBudget::current`]), or from
    /// the profile's edge total outside any request (rule [C8](crate::contract#c8)).
    ///
    /// See the [example](Self#examples).
    pub fn stamp<C: HeaderCarrier + ?Sized>(&self, headers: &mut C) -> Result<Stamp, BudgetError> {
        match (RequestBudget::current(), self.deadline) {
            (Some(budget), _) => self.stamp_with(&budget, headers),
            // A deadline of its own needs no request: rooted now.
            (None, EventDeadline::Own(own)) => {
                self.stamp_budget(&RequestBudget::local(own, self.profile.policy()), headers)
            }
            (None, EventDeadline::Inherit) => {
                tracing::debug!(
                    edge_total_ms = self.profile.edge_total().as_millis() as u64,
                    "deadline received: none; message published outside any request uses the edge total"
                );
                let budget =
                    RequestBudget::fallback(self.profile.edge_total(), self.profile.policy());
                self.stamp_budget(&budget, headers)
            }
        }
    }

    /// Stamp `headers` from `budget`: its forward budget as an absolute deadline, its budget at
    /// arrival as the origin, and the current trace as `traceparent` (feature `otlp`). With
    /// [`EventDeadline::Own`], a budget detached from `budget` and rooted now is stamped
    /// instead ([`RequestBudget::detach`]).
    ///
    /// Fails without writing anything when the forward budget is below the policy's refuse
    /// threshold, or the budget has ended (rule [C3](crate::contract#c3)).
    ///
    /// See the [example](Self#examples).
    pub fn stamp_with<C: HeaderCarrier + ?Sized>(
        &self,
        budget: &RequestBudget,
        headers: &mut C,
    ) -> Result<Stamp, BudgetError> {
        match self.deadline {
            EventDeadline::Inherit => self.stamp_budget(budget, headers),
            EventDeadline::Own(own) => self.stamp_budget(&budget.detach(own), headers),
        }
    }

    fn stamp_budget<C: HeaderCarrier + ?Sized>(
        &self,
        budget: &RequestBudget,
        headers: &mut C,
    ) -> Result<Stamp, BudgetError> {
        let forward = budget.admit_forward()?;
        let deadline = Carrier::Queue.encode(forward, || self.clock.now_unix_ms());
        let origin = Carrier::RelativeMs.encode(budget.at_arrival(), || 0);
        headers.set(&self.deadline_header, deadline.as_str());
        headers.set(&self.origin_header, origin.as_str());
        trace_link::inject(headers);
        Ok(Stamp {
            deadline_epoch_ms: epoch_value(deadline.as_str()),
            origin_ms: u64::try_from(budget.at_arrival().as_millis()).unwrap_or(u64::MAX),
            source: budget.source(),
        })
    }

    /// The header names this stamper writes: deadline, origin.
    ///
    /// See the [example](Self#examples).
    pub fn headers(&self) -> (&str, &str) {
        (&self.deadline_header, &self.origin_header)
    }
}

fn epoch_value(digits: &str) -> u64 {
    digits.parse().unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use std::time::Duration;

    use super::*;
    use crate::clock::{ManualClock, SkewedClock};

    #[tokio::test(start_paused = true)]
    async fn stamps_forward_budget_as_an_absolute_instant() {
        let profile = Profile::default();
        let stamper =
            Stamper::new(&profile).with_wall_clock(Arc::new(ManualClock::new(1_800_000_000_000)));
        let budget = RequestBudget::local(Duration::from_millis(400), profile.policy());
        tokio::time::advance(Duration::from_millis(100)).await;
        let mut h = HashMap::new();
        let stamp = stamper.stamp_with(&budget, &mut h).unwrap();
        // 300 ms left, less 5 ms margin and 1 ms transit (C2).
        assert_eq!(stamp.deadline_epoch_ms, 1_800_000_000_294);
        assert_eq!(h["deadline-epoch-ms"], "1800000000294");
        assert_eq!(h["deadline-origin-ms"], "400");
        assert_eq!(stamp.source, Source::Local);
    }

    #[tokio::test(start_paused = true)]
    async fn outside_a_request_the_edge_total_is_stamped() {
        let profile = Profile::default();
        let stamper = Stamper::new(&profile).with_wall_clock(Arc::new(ManualClock::new(1_000)));
        let mut h = HashMap::new();
        let stamp = stamper.stamp(&mut h).unwrap();
        assert_eq!(stamp.source, Source::Fallback);
        // edge total 1000 ms less 6 ms reserve.
        assert_eq!(stamp.deadline_epoch_ms, 1_994);
    }

    #[tokio::test(start_paused = true)]
    async fn a_budget_below_the_threshold_refuses_and_writes_nothing() {
        let profile = Profile::default();
        let stamper = Stamper::new(&profile).with_wall_clock(Arc::new(SkewedClock::new(0)));
        let budget = RequestBudget::local(Duration::from_millis(15), profile.policy());
        let mut h = HashMap::new();
        let err = stamper.stamp_with(&budget, &mut h).unwrap_err();
        assert!(matches!(err, BudgetError::Refused(_)), "{err:?}");
        assert!(h.is_empty());
    }
}
