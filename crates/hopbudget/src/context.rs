//! The per-request budget: a deadline, where it came from, and a cancellation tree that
//! remembers *why* it was cancelled.
//!
//! A [`RequestBudget`] is created once per inbound request (by a server layer, or by hand at
//! an edge) and then travels two ways: explicitly, in request extensions and function
//! arguments, and ambiently, in a task-local scope that [`RequestBudget::current`] reads so code
//! deep inside a handler needs no extra parameter (rule C11). Clones share one state.
//!
//! Cancellation is lazy: the `CancellationToken` behind [`RequestBudget::token`] and
//! [`RequestBudget::done`] is created the first time someone waits on it, so a request that
//! never spawns or waits pays for no cancellation tree. Expiry needs no timer either: a budget
//! whose deadline has passed *is* expired whether or not anyone noticed (rule C4).

use std::future::Future;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::task::futures::TaskLocalFuture;
use tokio_util::sync::CancellationToken;

use crate::budget::Deadline;
use crate::codec::Carrier;
use crate::error::{BudgetError, EndCause, Refused};

tokio::task_local! {
    static CURRENT: RequestBudget;
}

/// The arithmetic a hop applies before forwarding (rules C2, C3). Usually from the profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HopPolicy {
    /// Time this hop keeps back for itself: serialise, log, tear down.
    pub hop_margin: Duration,
    /// Time allowed for the request to travel to the next hop.
    pub transit_allowance: Duration,
    /// Below this forward budget no downstream call starts.
    pub refuse_below: Duration,
}

impl HopPolicy {
    /// The defaults of `profiles/default.yaml`: 5 ms margin, 1 ms transit, refuse below 10 ms.
    pub const DEFAULT: HopPolicy = HopPolicy {
        hop_margin: Duration::from_millis(5),
        transit_allowance: Duration::from_millis(1),
        refuse_below: Duration::from_millis(10),
    };

    /// Margin plus transit allowance: what a hop subtracts before forwarding.
    pub const fn reserve(&self) -> Duration {
        self.hop_margin.saturating_add(self.transit_allowance)
    }
}

impl Default for HopPolicy {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Where a request's budget came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// Read from this wire carrier.
    Carrier(Carrier),
    /// No carrier arrived; the profile's edge total was used (rule C8).
    Fallback,
    /// Set in process by the application (an edge, a CLI, a test).
    Local,
    /// Background work rooted at scheduling time (rule C12).
    Detached,
}

impl Source {
    /// The name used in traces (`deadline.source`) and metric labels.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Source::Carrier(c) => c.name(),
            Source::Fallback => "fallback",
            Source::Local => "local",
            Source::Detached => "detached",
        }
    }
}

/// A process-unique id for a budget, used to link detached work to its parent in traces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BudgetId(u64);

impl BudgetId {
    fn next() -> u64 {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        NEXT.fetch_add(1, Ordering::Relaxed)
    }

    /// The id as a number.
    pub const fn get(&self) -> u64 {
        self.0
    }
}

const LIVE: u8 = 0;
const EXPIRED: u8 = 1;
const CANCELLED: u8 = 2;

#[derive(Debug)]
struct Inner {
    /// Assigned on first use: most budgets never need one, and a process-wide counter
    /// touched by every request on every core is a contended cache line. Zero means unset.
    id: AtomicU64,
    deadline: Deadline,
    source: Source,
    at_arrival: Duration,
    policy: HopPolicy,
    cause: AtomicU8,
    token: OnceLock<CancellationToken>,
    /// Cancellation flows from this parent (child budgets, fan-out siblings).
    parent: Option<RequestBudget>,
    /// Detached work: the budget it was scheduled from, for tracing only (rule C12).
    linked_from: Option<BudgetId>,
}

/// One request's time budget, shared by everything the request does in this process.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use hopbudget::{HopPolicy, RequestBudget};
///
/// let budget = RequestBudget::local(Duration::from_millis(500), HopPolicy::DEFAULT);
/// tokio::time::advance(Duration::from_millis(20)).await;
/// assert_eq!(budget.remaining(), Duration::from_millis(480));
/// // What the next hop is told: remaining minus 5 ms margin minus 1 ms transit (C2).
/// assert_eq!(budget.forward(), Duration::from_millis(474));
/// // Refuse work that needs more than is left (C3).
/// assert!(budget.admit(Duration::from_millis(600)).is_err());
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RequestBudget {
    inner: Arc<Inner>,
}

impl RequestBudget {
    /// A budget with an explicit deadline and origin.
    pub fn new(deadline: Deadline, source: Source, policy: HopPolicy) -> Self {
        Self::build(deadline, source, policy, None, None)
    }

    /// A budget of `budget` from now, set in process (an edge or a test).
    pub fn local(budget: Duration, policy: HopPolicy) -> Self {
        Self::starting_now(budget, Source::Local, policy)
    }

    /// A budget read from a carrier, starting now (rule C1: the relative value becomes a local
    /// monotonic deadline on arrival).
    pub fn from_carrier(carrier: Carrier, budget: Duration, policy: HopPolicy) -> Self {
        Self::starting_now(budget, Source::Carrier(carrier), policy)
    }

    /// `budget` from now, reading the clock once: the deadline and the budget at arrival come
    /// from the same instant (the HTTP and gRPC layers create one of these per request).
    fn starting_now(budget: Duration, source: Source, policy: HopPolicy) -> Self {
        let now = tokio::time::Instant::now();
        let deadline = Deadline::after_from(now, budget);
        Self::build_with_arrival(
            deadline,
            deadline.remaining_at(now),
            source,
            policy,
            None,
            None,
        )
    }

    fn build(
        deadline: Deadline,
        source: Source,
        policy: HopPolicy,
        parent: Option<RequestBudget>,
        linked_from: Option<BudgetId>,
    ) -> Self {
        let at_arrival = deadline.remaining();
        Self::build_with_arrival(deadline, at_arrival, source, policy, parent, linked_from)
    }

    fn build_with_arrival(
        deadline: Deadline,
        at_arrival: Duration,
        source: Source,
        policy: HopPolicy,
        parent: Option<RequestBudget>,
        linked_from: Option<BudgetId>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                id: AtomicU64::new(0),
                at_arrival,
                deadline,
                source,
                policy,
                cause: AtomicU8::new(LIVE),
                token: OnceLock::new(),
                parent,
                linked_from,
            }),
        }
    }

    /// This budget's id.
    pub fn id(&self) -> BudgetId {
        let id = self.inner.id.load(Ordering::Relaxed);
        if id != 0 {
            return BudgetId(id);
        }
        let fresh = BudgetId::next();
        match self
            .inner
            .id
            .compare_exchange(0, fresh, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => BudgetId(fresh),
            // Another thread assigned one first; the spent number is simply skipped.
            Err(theirs) => BudgetId(theirs),
        }
    }

    /// The deadline.
    pub fn deadline(&self) -> Deadline {
        self.inner.deadline
    }

    /// Where the budget came from.
    pub fn source(&self) -> Source {
        self.inner.source
    }

    /// The budget when this request (or child) was created.
    pub fn at_arrival(&self) -> Duration {
        self.inner.at_arrival
    }

    /// The hop policy this budget forwards with.
    pub fn policy(&self) -> HopPolicy {
        self.inner.policy
    }

    /// For detached work, the budget it was scheduled from (a trace link, not a cancel link).
    pub fn linked_from(&self) -> Option<BudgetId> {
        self.inner.linked_from
    }

    /// Time left; zero once the deadline has passed.
    #[inline]
    pub fn remaining(&self) -> Duration {
        self.inner.deadline.remaining()
    }

    /// What to tell the next hop: remaining minus hop margin minus transit allowance, never
    /// negative (rule C2). Siblings launched together all get the same value (S8).
    #[inline]
    pub fn forward(&self) -> Duration {
        self.remaining().saturating_sub(self.inner.policy.reserve())
    }

    /// Check that `cost` fits in the remaining budget before starting expensive local work
    /// (rule C3). Fails with [`BudgetError::Refused`] stating the required and remaining
    /// budget, or with `Expired` / `Cancelled` if the budget has already ended.
    pub fn admit(&self, cost: Duration) -> Result<(), BudgetError> {
        // One clock read serves both the expiry check and the comparison.
        let remaining = self.live_remaining()?;
        if remaining < cost {
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
        if remaining.is_zero() {
            return Err(BudgetError::Expired);
        }
        Ok(remaining)
    }

    /// The forward budget for a downstream call, or a refusal when it is below the policy's
    /// threshold (rule C3): no connection is opened and no byte sent for a refused call.
    pub fn admit_forward(&self) -> Result<Duration, BudgetError> {
        self.admit_forward_for(self.inner.policy.refuse_below)
    }

    /// Like [`admit_forward`](Self::admit_forward) with an explicit requirement (the larger of
    /// it and the policy's threshold applies).
    pub fn admit_forward_for(&self, required: Duration) -> Result<Duration, BudgetError> {
        let required = required.max(self.inner.policy.refuse_below);
        let forward = self
            .live_remaining()?
            .saturating_sub(self.inner.policy.reserve());
        if forward < required {
            return Err(Refused::new(required, forward).into());
        }
        Ok(forward)
    }

    /// Why the budget ended, if it has: an explicit cancel or expiry recorded here or on a
    /// parent, or else the deadline having passed.
    pub fn end_cause(&self) -> Option<EndCause> {
        self.recorded_cause().or_else(|| {
            if self.inner.deadline.is_expired() {
                Some(EndCause::Expired)
            } else {
                None
            }
        })
    }

    pub(crate) fn recorded_cause(&self) -> Option<EndCause> {
        match self.inner.cause.load(Ordering::Acquire) {
            EXPIRED => Some(EndCause::Expired),
            CANCELLED => Some(EndCause::Cancelled),
            _ => self
                .inner
                .parent
                .as_ref()
                .and_then(RequestBudget::recorded_cause),
        }
    }

    /// Whether the budget has ended (expired or cancelled).
    pub fn is_done(&self) -> bool {
        self.end_cause().is_some()
    }

    /// Cancel this budget and everything under it: the caller went away (rule C5).
    ///
    /// If the deadline has already passed the cause is recorded as expired instead: a budget
    /// that ran out is never reported as cancelled (rule C4). Returns whether this call was the
    /// one that ended it.
    pub fn cancel(&self) -> bool {
        let cause = if self.inner.deadline.is_expired() {
            EXPIRED
        } else {
            CANCELLED
        };
        self.end_with(cause)
    }

    /// Mark this budget expired and cancel everything under it (rule C7). Layers call this
    /// when their deadline timer fires; [`done`](Self::done) does it for any waiter.
    pub fn expire(&self) -> bool {
        self.end_with(EXPIRED)
    }

    fn end_with(&self, cause: u8) -> bool {
        let won = self
            .inner
            .cause
            .compare_exchange(LIVE, cause, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if let Some(token) = self.inner.token.get() {
            token.cancel();
        }
        won
    }

    /// A `CancellationToken` cancelled when this budget ends, for code that speaks tokio-util.
    /// It is a child of the parent budget's token, so cancellation flows down the tree.
    pub fn token(&self) -> CancellationToken {
        let token = self.inner.token.get_or_init(|| match &self.inner.parent {
            Some(parent) => parent.token().child_token(),
            None => CancellationToken::new(),
        });
        // A cause recorded before the token existed still has to reach it.
        if self.inner.cause.load(Ordering::Acquire) != LIVE {
            token.cancel();
        }
        token.clone()
    }

    /// Resolves when the budget ends, with the cause. When it is the deadline that ends it,
    /// the budget is marked expired and its tree cancelled (rule C7), so that spawned children
    /// stop as well.
    pub async fn done(&self) -> EndCause {
        if let Some(cause) = self.end_cause() {
            self.end_with(match cause {
                EndCause::Expired => EXPIRED,
                EndCause::Cancelled => CANCELLED,
            });
            return cause;
        }
        let token = self.token();
        tokio::select! {
            biased;
            () = token.cancelled() => self.end_cause().unwrap_or(EndCause::Cancelled),
            () = tokio::time::sleep_until(self.inner.deadline.instant()) => {
                self.expire();
                self.recorded_cause().unwrap_or(EndCause::Expired)
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
    pub fn child(&self) -> RequestBudget {
        Self::build(
            self.inner.deadline,
            self.inner.source,
            self.inner.policy,
            Some(self.clone()),
            None,
        )
    }

    /// A child budget whose deadline is the tighter of this one's and `deadline`.
    pub fn child_until(&self, deadline: Deadline) -> RequestBudget {
        Self::build(
            self.inner.deadline.min(deadline),
            self.inner.source,
            self.inner.policy,
            Some(self.clone()),
            None,
        )
    }

    /// A fresh budget for background work started by this request (rule C12): rooted now,
    /// not cancelled when the request ends, linked to this budget for tracing.
    pub fn detach(&self, budget: Duration) -> RequestBudget {
        Self::build(
            Deadline::after(budget),
            Source::Detached,
            self.inner.policy,
            None,
            Some(self.id()),
        )
    }

    /// Make this budget the ambient one while `fut` runs.
    pub fn scope<F: Future>(&self, fut: F) -> TaskLocalFuture<RequestBudget, F> {
        CURRENT.scope(self.clone(), fut)
    }

    /// Make this budget the ambient one while `f` runs (synchronous code, blocking threads).
    pub fn sync_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        CURRENT.sync_scope(self.clone(), f)
    }

    /// The ambient budget of the current task, if any.
    pub fn current() -> Option<RequestBudget> {
        CURRENT.try_with(RequestBudget::clone).ok()
    }

    /// Whether two handles share the same budget state.
    pub fn ptr_eq(&self, other: &RequestBudget) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(ms: u64) -> RequestBudget {
        RequestBudget::local(Duration::from_millis(ms), HopPolicy::DEFAULT)
    }

    #[tokio::test(start_paused = true)]
    async fn forward_subtracts_margin_and_transit() {
        let b = budget(500);
        assert_eq!(b.forward(), Duration::from_millis(494));
        tokio::time::advance(Duration::from_millis(490)).await;
        assert_eq!(b.forward(), Duration::from_millis(4));
        tokio::time::advance(Duration::from_millis(5)).await;
        assert_eq!(b.forward(), Duration::ZERO, "never negative");
        assert_eq!(b.at_arrival(), Duration::from_millis(500));
    }

    #[tokio::test(start_paused = true)]
    async fn admit_states_required_and_remaining() {
        let b = budget(120);
        let err = b.admit(Duration::from_millis(200)).unwrap_err();
        let BudgetError::Refused(r) = err else {
            panic!("{err:?}")
        };
        assert_eq!(r.required(), Duration::from_millis(200));
        assert_eq!(r.remaining(), Duration::from_millis(120));
        assert_eq!(
            r.to_string(),
            "refused before start: needs 200 ms, 120 ms remain"
        );
        assert!(b.admit(Duration::from_millis(100)).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn admit_forward_refuses_below_threshold() {
        let b = budget(15); // forward = 9 ms < 10 ms threshold
        assert!(matches!(b.admit_forward(), Err(BudgetError::Refused(_))));
        let b = budget(16);
        assert_eq!(b.admit_forward(), Ok(Duration::from_millis(10)));
        assert!(matches!(
            b.admit_forward_for(Duration::from_millis(50)),
            Err(BudgetError::Refused(r)) if r.required() == Duration::from_millis(50)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn expiry_is_not_cancellation() {
        let b = budget(100);
        let child = b.child();
        let waiter = tokio::spawn({
            let child = child.clone();
            async move { child.done().await }
        });
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(waiter.await.unwrap(), EndCause::Expired);
        // A cancel that arrives after expiry does not rewrite history (C4).
        b.cancel();
        assert_eq!(b.end_cause(), Some(EndCause::Expired));
        assert_eq!(child.end_cause(), Some(EndCause::Expired));
    }

    #[tokio::test(start_paused = true)]
    async fn cancellation_flows_to_children_with_its_cause() {
        let b = budget(1_000);
        let child = b.child();
        let grandchild = child.child();
        let token = grandchild.token();
        let waiter = tokio::spawn({
            let g = grandchild.clone();
            async move { g.done().await }
        });
        tokio::task::yield_now().await;
        assert!(b.cancel());
        assert_eq!(waiter.await.unwrap(), EndCause::Cancelled);
        assert!(token.is_cancelled());
        assert_eq!(grandchild.end_cause(), Some(EndCause::Cancelled));
        // A child ended on its own does not end the parent.
        let b2 = budget(1_000);
        let c2 = b2.child();
        c2.cancel();
        assert_eq!(b2.end_cause(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn token_created_after_cancel_is_cancelled() {
        let b = budget(1_000);
        let child = b.child();
        b.cancel();
        assert!(child.token().is_cancelled());
        assert_eq!(child.done().await, EndCause::Cancelled);
    }

    #[tokio::test(start_paused = true)]
    async fn run_stops_work_at_the_deadline() {
        let b = budget(50);
        let started = tokio::time::Instant::now();
        let r = b.run(tokio::time::sleep(Duration::from_secs(10))).await;
        assert_eq!(r, Err(BudgetError::Expired));
        assert_eq!(started.elapsed(), Duration::from_millis(50));
        assert_eq!(b.run(async { 1 }).await, Err(BudgetError::Expired));
    }

    #[tokio::test(start_paused = true)]
    async fn scope_makes_the_budget_ambient() {
        assert!(RequestBudget::current().is_none());
        let b = budget(100);
        let seen = b.scope(async { RequestBudget::current() }).await.unwrap();
        assert!(seen.ptr_eq(&b));
        let id = b.sync_scope(|| RequestBudget::current().map(|c| c.id()));
        assert_eq!(id, Some(b.id()));
        assert!(RequestBudget::current().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn detach_is_rooted_at_scheduling_and_survives_the_request() {
        let request = budget(100);
        tokio::time::advance(Duration::from_millis(90)).await;
        let background = request.detach(Duration::from_secs(5));
        assert_eq!(background.source(), Source::Detached);
        assert_eq!(background.linked_from(), Some(request.id()));
        request.cancel();
        tokio::time::advance(Duration::from_millis(200)).await;
        assert!(request.is_done());
        assert!(
            !background.is_done(),
            "background work is not cancelled with its request"
        );
        assert_eq!(background.remaining(), Duration::from_millis(4_800));
    }

    #[tokio::test(start_paused = true)]
    async fn child_until_takes_the_tighter_deadline() {
        let b = budget(100);
        let c = b.child_until(Deadline::after(Duration::from_millis(40)));
        assert_eq!(c.remaining(), Duration::from_millis(40));
        let c = b.child_until(Deadline::after(Duration::from_millis(400)));
        assert_eq!(c.remaining(), Duration::from_millis(100));
    }
}
