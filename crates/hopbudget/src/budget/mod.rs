//! The per-request budget: a deadline, where it came from, and a cancellation tree that
//! remembers *why* it was cancelled.
//!
//! A [`RequestBudget`] is created once per inbound request (by a server layer, or by hand at
//! an edge) and then travels two ways: explicitly, in request extensions and function
//! arguments, and ambiently, in a task-local scope that [`RequestBudget::current`] reads so code
//! deep inside a handler needs no extra parameter (rule [C11](crate::contract#c11)). Clones share one state.
//!
//! Cancellation is lazy: the `CancellationToken` behind [`RequestBudget::token`] and
//! [`RequestBudget::done`] is created the first time someone waits on it, so a request that
//! never spawns or waits pays for no cancellation tree. Expiry needs no timer either: a budget
//! whose deadline has passed *is* expired whether or not anyone noticed (rule [C4](crate::contract#c4)).
//!
//! Laid out as tokio-util lays out `CancellationToken`: this file is the public handle and
//! its docs; the machinery is private, one concept a file: `deadline` ([`Deadline`]),
//! `policy` ([`HopPolicy`]), `source` ([`Source`], [`BudgetId`]), `node` (the shared
//! allocation and its reuse), `state` (the end-state word, the cause walk and the fences, with
//! their invariants; model-checked by loom in `loom/`), `token` (the lazy token), `timer`
//! (the runtime's shared deadline timer that a token handed out joins; its slot and map
//! model-checked by loom too) and `scope` (the ambient budget, rule [C11](crate::contract#c11)). Long because every public method carries
//! its docs.
//!
//! One file on purpose, over 500 lines: `RequestBudget`'s methods are the type's whole public face;
//! its parts (state, node, timer, scope, token) are the sibling files.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::codec::Carrier;
use crate::error::{BudgetError, EndCause, Refused};

pub(crate) mod deadline;
mod node;
mod policy;
mod scope;
mod source;
mod state;
mod timer;
mod token;

#[cfg(test)]
mod tests;

/// What the current runtime's deadline timer holds: (entries, moves of its sleep to an
/// earlier instant). For tests; see `timer.rs`.
#[cfg(test)]
pub(crate) fn timer_stats() -> (usize, u64) {
    timer::stats()
}

pub use deadline::Deadline;
use node::{Inner, Parts};
pub use policy::HopPolicy;
pub use scope::Scoped;
pub(crate) use scope::{Lent, lend};
pub use source::{BudgetId, Source};
use state::{EXPIRED, LIVE};

/// One request's time budget, shared by everything the request does in this process.
///
/// # Examples
///
/// Creating one, and the arithmetic of a hop ([C2](crate::contract#c2), [C3](crate::contract#c3)):
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use hopbudget::codec::Carrier;
/// use hopbudget::{Deadline, HopPolicy, RequestBudget, Source};
///
/// let budget = RequestBudget::local(Duration::from_millis(500), HopPolicy::DEFAULT);
/// tokio::time::advance(Duration::from_millis(20)).await;
/// assert_eq!(budget.remaining(), Duration::from_millis(480));
/// assert_eq!(budget.at_arrival(), Duration::from_millis(500));
/// assert_eq!(budget.deadline().remaining(), budget.remaining());
/// assert_eq!(budget.source(), Source::Local);
/// // What the next hop is told: remaining minus 5 ms margin minus 1 ms transit (C2).
/// assert_eq!(budget.policy().reserve(), Duration::from_millis(6));
/// assert_eq!(budget.forward(), Duration::from_millis(474));
/// assert_eq!(budget.admit_forward(), Ok(Duration::from_millis(474)));
/// // Refuse work that needs more than is left (C3); a callee's stated requirement too.
/// assert!(budget.admit(Duration::from_millis(600)).is_err());
/// assert!(budget.admit_forward_for(Duration::from_millis(600)).is_err());
///
/// // What a server layer creates: from a carrier, or from an explicit deadline and source.
/// let inbound = RequestBudget::from_carrier(Carrier::GrpcTimeout, Duration::from_millis(300), HopPolicy::DEFAULT);
/// assert_eq!(inbound.source().as_str(), "grpc-timeout");
/// let explicit = RequestBudget::new(Deadline::after(Duration::from_secs(1)), Source::Local, HopPolicy::DEFAULT);
/// assert_eq!(explicit.source().as_str(), "local");
/// // No deadline arrived: the edge total (C8), exactly.
/// let fallback = RequestBudget::fallback(Duration::from_millis(1_500), HopPolicy::DEFAULT);
/// assert_eq!(fallback.source().as_str(), "fallback");
/// assert_eq!(fallback.at_arrival(), Duration::from_millis(1_500));
/// # }
/// ```
///
/// Ending it, and its children ([C4](crate::contract#c4), [C5](crate::contract#c5), [C7](crate::contract#c7), [C12](crate::contract#c12)):
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use hopbudget::{Deadline, EndCause, HopPolicy, RequestBudget};
///
/// let request = RequestBudget::local(Duration::from_millis(500), HopPolicy::DEFAULT);
/// let child = request.child(); // same deadline, ends with the request
/// let tighter = request.child_until(Deadline::after(Duration::from_millis(100)));
/// assert_eq!(tighter.remaining(), Duration::from_millis(100));
/// let email = request.detach(Duration::from_secs(30)); // its own deadline, rooted now
/// assert_eq!(email.linked_from(), Some(request.id()));
/// assert!(request.id().get() > 0);
///
/// let token = child.token(); // a tokio-util CancellationToken for other code
/// assert_eq!(tighter.done().await, EndCause::Expired); // its own deadline passed first
/// assert!(request.cancel()); // the caller went away
/// assert!(request.is_done() && child.is_done() && token.is_cancelled());
/// assert_eq!(child.end_cause(), Some(EndCause::Cancelled));
/// assert!(!email.is_done(), "detached work outlives the request");
/// assert!(!request.expire(), "the first end cause stays");
/// # }
/// ```
///
/// The ambient budget ([C11](crate::contract#c11)):
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
/// use hopbudget::{HopPolicy, RequestBudget};
///
/// let budget = RequestBudget::local(Duration::from_millis(500), HopPolicy::DEFAULT);
/// assert!(RequestBudget::current().is_none());
/// let inside = budget.scope(async { RequestBudget::current() }).await.unwrap();
/// assert!(inside.ptr_eq(&budget)); // clones share one state
/// let also = budget.sync_scope(|| RequestBudget::current()).unwrap();
/// assert!(also.ptr_eq(&budget));
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RequestBudget {
    inner: Arc<Inner>,
}

impl RequestBudget {
    /// A budget with an explicit deadline and origin.
    ///
    /// See the [example](Self#examples).
    pub fn new(deadline: Deadline, source: Source, policy: HopPolicy) -> Self {
        Self::build(deadline, source, policy, None, None)
    }

    /// A budget of `budget` from now, set in process (an edge or a test).
    ///
    /// See the [example](Self#examples).
    pub fn local(budget: Duration, policy: HopPolicy) -> Self {
        Self::starting_now(budget, Source::Local, policy)
    }

    /// The profile's edge total from now, for a request or message that arrived without a
    /// deadline (rule [C8](crate::contract#c8)). The clock is read once, so its budget at arrival is exactly
    /// `edge_total`: `RequestBudget::new(Deadline::after(edge_total), ..)` reads it twice and
    /// reports a hair less (1,499 ms for 1,500).
    ///
    /// See the [example](Self#examples).
    #[inline]
    pub fn fallback(edge_total: Duration, policy: HopPolicy) -> Self {
        Self::starting_now(edge_total, Source::Fallback, policy)
    }

    /// A budget read from a carrier, starting now (rule [C1](crate::contract#c1): the relative value becomes a local
    /// monotonic deadline on arrival).
    ///
    /// See the [example](Self#examples).
    #[inline]
    pub fn from_carrier(carrier: Carrier, budget: Duration, policy: HopPolicy) -> Self {
        Self::starting_now(budget, Source::Carrier(carrier), policy)
    }

    /// `budget` from now, reading the clock once: the deadline and the budget at arrival come
    /// from the same instant (the HTTP and gRPC layers create one of these per request).
    #[inline]
    fn starting_now(budget: Duration, source: Source, policy: HopPolicy) -> Self {
        let now = tokio::time::Instant::now();
        // `now + budget` is the deadline and `budget` the budget at arrival, unless the sum
        // leaves the clock's range and `after_from` caps it (no subtraction on the hot path).
        let (deadline, at_arrival) = match now.checked_add(budget) {
            Some(at) => (Deadline::at(at), budget),
            None => {
                let capped = Deadline::after_from(now, budget);
                (capped, capped.remaining_at(now))
            }
        };
        Self::from_parts(Parts::root_at(deadline, at_arrival, source, policy))
    }

    /// This budget's id.
    ///
    /// See the [example](Self#examples).
    pub fn id(&self) -> BudgetId {
        BudgetId::assign(&self.inner.id)
    }

    /// The deadline. On a stream route it moves once, to the stream lifetime, when the first
    /// chunk goes out (rule [C13](crate::contract#c13)).
    ///
    /// See the [example](Self#examples).
    #[inline]
    pub fn deadline(&self) -> Deadline {
        match &self.inner.stream {
            None => self.inner.deadline,
            Some(stream) => match stream.get() {
                None => self.inner.deadline,
                Some(lifetime) => self.inner.cap.map_or(lifetime, |cap| cap.min(lifetime)),
            },
        }
    }

    /// Where the budget came from.
    ///
    /// See the [example](Self#examples).
    pub fn source(&self) -> Source {
        self.inner.source
    }

    /// The budget when this request (or child) was created.
    ///
    /// See the [example](Self#examples).
    pub fn at_arrival(&self) -> Duration {
        self.inner.at_arrival
    }

    /// The hop policy this budget forwards with.
    ///
    /// See the [example](Self#examples).
    pub fn policy(&self) -> HopPolicy {
        self.inner.policy
    }

    /// Whether this budget is enforced (see [`HopPolicy::enforce`]): `false` under a profile
    /// whose kill switch is off (rule [C24](crate::contract#c24)). Adapters that bound a wait or set a server-side
    /// timeout from the budget skip it then; the budget is still forwarded and recorded.
    ///
    /// ```
    /// use std::time::Duration;
    /// use hopbudget::{HopPolicy, RequestBudget};
    ///
    /// let observe_only = HopPolicy { enforce: false, ..HopPolicy::DEFAULT };
    /// let budget = RequestBudget::local(Duration::from_millis(3), observe_only);
    /// assert!(!budget.is_enforced());
    /// // Nothing is refused for lack of time, and the forward budget is still computed.
    /// assert!(budget.admit(Duration::from_secs(1)).is_ok());
    /// assert_eq!(budget.admit_forward().unwrap(), budget.forward());
    /// ```
    #[inline]
    pub fn is_enforced(&self) -> bool {
        self.inner.policy.enforce
    }

    /// For detached work, the budget it was scheduled from (a trace link, not a cancel link).
    ///
    /// See the [example](Self#examples).
    pub fn linked_from(&self) -> Option<BudgetId> {
        self.inner.linked_from
    }

    /// Time left; zero once the deadline has passed.
    ///
    /// See the [example](Self#examples).
    #[inline]
    pub fn remaining(&self) -> Duration {
        self.deadline().remaining()
    }

    /// What to tell the next hop: remaining minus hop margin minus transit allowance, never
    /// negative (rule [C2](crate::contract#c2)). Siblings launched together all get the same value ([S8](crate::contract#s8)).
    ///
    /// See the [example](Self#examples).
    #[inline]
    pub fn forward(&self) -> Duration {
        self.remaining().saturating_sub(self.inner.policy.reserve())
    }

    /// Check that `cost` fits in the remaining budget before starting expensive local work
    /// (rule [C3](crate::contract#c3)). Fails with [`BudgetError::Refused`] stating the required and remaining
    /// budget, or with `Expired` / `Cancelled` if the budget has already ended.
    ///
    /// See the [example](Self#examples).
    pub fn admit(&self, cost: Duration) -> Result<(), BudgetError> {
        // One clock read serves both the expiry check and the comparison.
        let remaining = self.live_remaining()?;
        if remaining < cost && self.inner.policy.enforce {
            return Err(Refused::new(cost, remaining).into());
        }
        Ok(())
    }

    /// The remaining budget, or why the budget has already ended. Reads the clock once.
    #[inline]
    fn live_remaining(&self) -> Result<Duration, BudgetError> {
        if let Some(cause) = self.recorded_cause() {
            return Err(cause.into());
        }
        let remaining = self.remaining();
        if remaining.is_zero() && self.inner.policy.enforce {
            return Err(BudgetError::Expired);
        }
        Ok(remaining)
    }

    /// The forward budget for a downstream call, or a refusal when it is below the policy's
    /// threshold (rule [C3](crate::contract#c3)): no connection is opened and no byte sent for a refused call.
    ///
    /// See the [example](Self#examples).
    pub fn admit_forward(&self) -> Result<Duration, BudgetError> {
        self.admit_forward_for(self.inner.policy.refuse_below)
    }

    /// Like [`admit_forward`](Self::admit_forward) with an explicit requirement (the larger of
    /// it and the policy's threshold applies).
    ///
    /// See the [example](Self#examples).
    pub fn admit_forward_for(&self, required: Duration) -> Result<Duration, BudgetError> {
        let required = required.max(self.inner.policy.refuse_below);
        let forward = self
            .live_remaining()?
            .saturating_sub(self.inner.policy.reserve());
        if forward < required && self.inner.policy.enforce {
            return Err(Refused::new(required, forward).into());
        }
        Ok(forward)
    }

    /// Why the budget ended, if it has: an explicit cancel or expiry recorded here or on a
    /// parent, or else the deadline having passed.
    ///
    /// See the [example](Self#examples).
    pub fn end_cause(&self) -> Option<EndCause> {
        self.recorded_cause().or_else(|| {
            // Unenforced (C24), a passed deadline ends nothing: only a cancel or an explicit
            // `expire` does.
            if self.inner.policy.enforce && self.deadline().is_expired() {
                Some(EndCause::Expired)
            } else {
                None
            }
        })
    }

    /// Whether the budget has ended (expired or cancelled).
    ///
    /// See the [example](Self#examples).
    pub fn is_done(&self) -> bool {
        self.end_cause().is_some()
    }

    /// Cancel this budget and everything under it: the caller went away (rule [C5](crate::contract#c5)).
    ///
    /// If the deadline has already passed the cause is recorded as expired instead: a budget
    /// that ran out is never reported as cancelled (rule [C4](crate::contract#c4)). Returns whether this call was the
    /// one that ended it.
    ///
    /// See the [example](Self#examples).
    pub fn cancel(&self) -> bool {
        self.cancel_at(tokio::time::Instant::now())
    }

    /// Mark this budget expired and cancel everything under it (rule [C7](crate::contract#c7)). Layers call this
    /// when their deadline timer fires; the budget's own timer does it for any token holder.
    ///
    /// See the [example](Self#examples).
    pub fn expire(&self) -> bool {
        self.end_with(EXPIRED)
    }

    /// A `CancellationToken` cancelled when this budget ends, for code that speaks tokio-util.
    /// It is a child of the parent budget's token, so cancellation flows down the tree, and it
    /// is cancelled at the deadline whether or not anyone awaits [`done`](Self::done) (rule
    /// [C7](crate::contract#c7)): the first call puts the budget in the current tokio runtime's
    /// deadline timer (one sleep for the whole runtime, not a task per token).
    ///
    /// See the [example](Self#examples).
    pub fn token(&self) -> CancellationToken {
        // A token asked for after the deadline is cancelled already (C7): the timer that
        // would cancel it has not run yet, and code that checks `is_cancelled()` at once must
        // not start late work meanwhile. One clock read, only while the budget is live.
        if self.inner.policy.enforce
            && self.inner.state.word() == LIVE
            && self.deadline().is_expired()
        {
            self.end_with(EXPIRED);
        }
        let token = self.waiting_token();
        // Handed out: nobody may be waiting when the deadline comes (C7).
        self.arm_timer();
        token
    }

    /// Resolves when the budget ends, with the cause. When it is the deadline that ends it,
    /// the budget is marked expired and its tree cancelled (rule [C7](crate::contract#c7)), so that spawned children
    /// stop as well.
    ///
    /// See the [example](Self#examples).
    pub async fn done(&self) -> EndCause {
        loop {
            if let Some(cause) = self.end_cause() {
                if cause == EndCause::Expired {
                    // The deadline passed unnoticed: record it, which cancels the tree (C7).
                    // A cancellation was recorded by whoever cancelled, and reached the tree.
                    self.end_with(EXPIRED);
                }
                return self.recorded_cause().unwrap_or(cause);
            }
            // This wait has its own timer below: the token need not join the deadline timer.
            let token = self.waiting_token();
            if !self.inner.policy.enforce {
                // Unenforced (C24): only a cancel or an explicit `expire` ends the budget.
                token.cancelled().await;
                return self.recorded_cause().unwrap_or(EndCause::Cancelled);
            }
            tokio::select! {
                biased;
                () = token.cancelled() => {
                    return self.end_cause().unwrap_or(EndCause::Cancelled);
                }
                () = tokio::time::sleep_until(self.deadline().instant()) => {
                    // A stream route's deadline may have moved meanwhile: look again.
                    if self.deadline().is_expired() {
                        self.expire();
                        return self.recorded_cause().unwrap_or(EndCause::Expired);
                    }
                }
            }
        }
    }

    /// Run `fut` under this budget: inside its task-local scope, and stopped (dropped) when
    /// the budget ends. An already-ended budget does not start the future.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// use std::time::Duration;
    /// use hopbudget::{BudgetError, HopPolicy, RequestBudget};
    ///
    /// let budget = RequestBudget::local(Duration::from_millis(50), HopPolicy::DEFAULT);
    /// let slow = tokio::time::sleep(Duration::from_secs(1));
    /// assert_eq!(budget.run(slow).await, Err(BudgetError::Expired));
    /// # }
    /// ```
    pub async fn run<F: Future>(&self, fut: F) -> Result<F::Output, BudgetError> {
        if let Some(cause) = self.end_cause() {
            return Err(cause.into());
        }
        tokio::select! {
            biased;
            out = self.scope(fut) => Ok(out),
            cause = self.done() => Err(cause.into()),
        }
    }

    /// A child budget: the same deadline, cancelled with this one, cancellable on its own.
    ///
    /// See the [example](Self#examples).
    pub fn child(&self) -> RequestBudget {
        let mut parts = Parts::root(self.inner.deadline, self.inner.source, self.inner.policy);
        parts.at_arrival = self.remaining();
        self.adopt(parts)
    }

    /// A child budget whose deadline is the tighter of this one's and `deadline`. A stream
    /// route's lifetime never lifts it past `deadline`.
    ///
    /// See the [example](Self#examples).
    pub fn child_until(&self, deadline: Deadline) -> RequestBudget {
        let tighter = self.deadline().min(deadline);
        let mut parts = Parts::root(tighter, self.inner.source, self.inner.policy);
        parts.cap = Some(self.inner.cap.map_or(deadline, |cap| cap.min(deadline)));
        self.adopt(parts)
    }

    fn adopt(&self, mut parts: Parts) -> RequestBudget {
        parts.depth = self.inner.depth.saturating_add(1);
        parts.stream = self.inner.stream.clone();
        parts.cap = parts.cap.or(self.inner.cap);
        parts.parent = Some(self.clone());
        Self::from_parts(parts)
    }

    /// A fresh budget for background work started by this request (rule [C12](crate::contract#c12)): rooted now,
    /// not cancelled when the request ends, linked to this budget for tracing.
    ///
    /// See the [example](Self#examples).
    pub fn detach(&self, budget: Duration) -> RequestBudget {
        // One clock read for the deadline and the budget at arrival, so the detached hop
        // reports exactly `budget` (#32).
        let now = tokio::time::Instant::now();
        let deadline = Deadline::after_from(now, budget);
        let mut parts = Parts::root_at(
            deadline,
            deadline.remaining_at(now),
            Source::Detached,
            self.inner.policy,
        );
        parts.linked_from = Some(self.id());
        Self::from_parts(parts)
    }

    /// Make this budget the ambient one while `fut` runs.
    ///
    /// See the [example](Self#examples).
    pub fn scope<F: Future>(&self, fut: F) -> crate::budget::Scoped<F> {
        crate::budget::Scoped::new(self.clone(), fut)
    }

    /// Make this budget the ambient one while `f` runs (synchronous code, blocking threads).
    ///
    /// See the [example](Self#examples).
    #[inline]
    pub fn sync_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        scope::enter(self, f)
    }

    /// The ambient budget of the current task, if any.
    ///
    /// See the [example](Self#examples).
    pub fn current() -> Option<RequestBudget> {
        scope::current()
    }

    /// Whether two handles share the same budget state.
    ///
    /// See the [example](Self#examples).
    pub fn ptr_eq(&self, other: &RequestBudget) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}
