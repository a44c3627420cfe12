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

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::budget::Deadline;
use crate::codec::Carrier;
use crate::error::{BudgetError, EndCause, Refused};

/// The arithmetic a hop applies before forwarding (rules C2, C3). Usually from the profile.
///
/// See the [example](RequestBudget#examples).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HopPolicy {
    /// Time this hop keeps back for itself: serialise, log, tear down.
    pub hop_margin: Duration,
    /// Time allowed for the request to travel to the next hop.
    pub transit_allowance: Duration,
    /// Below this forward budget no downstream call starts.
    pub refuse_below: Duration,
    /// Whether the budget is enforced: calls refused below the threshold, work ended at the
    /// deadline (rules C3, C7). `false` is the profile's kill switch (`enforce: false`, rule
    /// C24): the budget is still computed, forwarded and recorded, but nothing is refused or
    /// cut for lack of time. Children and detached budgets inherit it.
    pub enforce: bool,
}

impl HopPolicy {
    /// The defaults of `profiles/default.yaml`: 5 ms margin, 1 ms transit, refuse below 10 ms.
    ///
    /// See the [example](RequestBudget#examples).
    pub const DEFAULT: HopPolicy = HopPolicy {
        hop_margin: Duration::from_millis(5),
        transit_allowance: Duration::from_millis(1),
        refuse_below: Duration::from_millis(10),
        enforce: true,
    };

    /// Margin plus transit allowance: what a hop subtracts before forwarding.
    ///
    /// See the [example](RequestBudget#examples).
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
///
/// See the [example](RequestBudget#examples).
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
    ///
    /// See the [example](RequestBudget#examples).
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
///
/// See the [example](RequestBudget#examples).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BudgetId(u64);

impl BudgetId {
    fn next() -> u64 {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        NEXT.fetch_add(1, Ordering::Relaxed)
    }

    /// The id as a number.
    ///
    /// See the [example](RequestBudget#examples).
    pub const fn get(&self) -> u64 {
        self.0
    }
}

// The end state of a budget, in one word so that recording it is a single compare-and-swap:
// the cause in the top two bits and, for a cancellation, how long before the budget's
// creation deadline it happened (in nanoseconds, saturating) in the rest. A child budget
// with a tighter deadline compares that instant with its own deadline, so a child that had
// already expired stays expired when its parent is cancelled later (rule C4).
const LIVE: u64 = 0;
const EXPIRED: u64 = 1 << 62;
const CANCELLED: u64 = 2 << 62;
const CAUSE_BITS: u64 = 3 << 62;
const NANOS_BITS: u64 = !CAUSE_BITS;

/// Below this depth a budget looks for an ancestor's end cause by walking up the tree; deeper
/// budgets (a task that respawns itself level after level) first ask their cancellation
/// token, which the tree's cancellation reaches in one step, so no check costs O(depth).
const WALK_DEPTH: u32 = 8;

#[derive(Debug)]
struct Inner {
    /// Assigned on first use: most budgets never need one, and a process-wide counter
    /// touched by every request on every core is a contended cache line. Zero means unset.
    id: AtomicU64,
    /// The deadline when the budget was made. It only moves for a stream route, after its
    /// first chunk (see `stream`).
    deadline: Deadline,
    source: Source,
    at_arrival: Duration,
    policy: HopPolicy,
    state: AtomicU64,
    token: OnceLock<CancellationToken>,
    /// Cancellation flows from this parent (child budgets, fan-out siblings).
    parent: Option<RequestBudget>,
    /// How many parents above this budget.
    depth: u32,
    /// Detached work: the budget it was scheduled from, for tracing only (rule C12).
    linked_from: Option<BudgetId>,
    /// Stream routes only (rule C13): set when the first chunk goes out, after which the
    /// stream lifetime replaces the request deadline for this budget and every child of it.
    stream: Option<Arc<StreamDeadline>>,
    /// A tighter limit of this budget's own (`child_until`), which a stream's lifetime does
    /// not lift.
    cap: Option<Deadline>,
}

/// The deadline a stream route's budget runs under once its first chunk is out (rule C13).
#[derive(Debug, Default)]
struct StreamDeadline(Mutex<Option<Deadline>>);

impl StreamDeadline {
    fn get(&self) -> Option<Deadline> {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn set(&self, deadline: Deadline) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(deadline);
    }
}

impl Inner {
    fn new(p: Parts) -> Self {
        Inner {
            id: AtomicU64::new(0),
            at_arrival: p.at_arrival,
            deadline: p.deadline,
            source: p.source,
            policy: p.policy,
            state: AtomicU64::new(LIVE),
            token: OnceLock::new(),
            parent: p.parent,
            depth: p.depth,
            linked_from: p.linked_from,
            stream: p.stream,
            cap: p.cap,
        }
    }

    /// Become a new budget made of `p`, field by field. A recycled budget owns nothing that
    /// needs dropping (see `RequestBudget::recycle`), so this is cheaper than assigning a
    /// whole new `Inner`, which would run `Inner`'s own drop on the old one first.
    #[inline(always)]
    fn reuse(&mut self, p: Parts) {
        // Field by field from a destructured `p`: moving `p` whole costs a copy of it first.
        let Parts {
            deadline,
            at_arrival,
            source,
            policy,
            parent,
            depth,
            linked_from,
            stream,
            cap,
        } = p;
        *self.id.get_mut() = 0;
        self.at_arrival = at_arrival;
        self.deadline = deadline;
        self.source = source;
        self.policy = policy;
        *self.state.get_mut() = LIVE;
        self.token = OnceLock::new();
        self.parent = parent;
        self.depth = depth;
        self.linked_from = linked_from;
        self.stream = stream;
        self.cap = cap;
    }
}

thread_local! {
    /// The allocation of the last budget a hop dropped on this thread, for the next one.
    static SPARE: Cell<Option<Arc<Inner>>> = const { Cell::new(None) };
}

impl Drop for Inner {
    // A chain of parents 100 000 budgets deep (a task that respawns itself) would otherwise be
    // dropped by recursion, one stack frame per level. Unlink it iteratively instead.
    fn drop(&mut self) {
        let mut next = self.parent.take();
        while let Some(parent) = next {
            next = match Arc::try_unwrap(parent.inner) {
                Ok(mut inner) => inner.parent.take(),
                Err(_) => None,
            };
        }
    }
}

/// What a new budget is made of, before it is shared.
struct Parts {
    deadline: Deadline,
    at_arrival: Duration,
    source: Source,
    policy: HopPolicy,
    parent: Option<RequestBudget>,
    depth: u32,
    linked_from: Option<BudgetId>,
    stream: Option<Arc<StreamDeadline>>,
    cap: Option<Deadline>,
}

impl Parts {
    fn root(deadline: Deadline, source: Source, policy: HopPolicy) -> Self {
        Self::root_at(deadline, deadline.remaining(), source, policy)
    }

    /// A root whose budget at arrival the caller already knows (no clock read here).
    #[inline]
    fn root_at(
        deadline: Deadline,
        at_arrival: Duration,
        source: Source,
        policy: HopPolicy,
    ) -> Self {
        Self {
            deadline,
            at_arrival,
            source,
            policy,
            parent: None,
            depth: 0,
            linked_from: None,
            stream: None,
            cap: None,
        }
    }
}

/// One request's time budget, shared by everything the request does in this process.
///
/// # Examples
///
/// Creating one, and the arithmetic of a hop (C2, C3):
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
/// Ending it, and its children (C4, C5, C7, C12):
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
/// The ambient budget (C11):
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
    /// deadline (rule C8). The clock is read once, so its budget at arrival is exactly
    /// `edge_total`: `RequestBudget::new(Deadline::after(edge_total), ..)` reads it twice and
    /// reports a hair less (1,499 ms for 1,500).
    ///
    /// See the [example](Self#examples).
    #[inline]
    pub fn fallback(edge_total: Duration, policy: HopPolicy) -> Self {
        Self::starting_now(edge_total, Source::Fallback, policy)
    }

    /// A budget read from a carrier, starting now (rule C1: the relative value becomes a local
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

    /// A budget for a request on a stream route (rule C13): after its first chunk,
    /// [`start_stream`](Self::start_stream) moves its deadline, and its children's, to the
    /// stream lifetime.
    pub(crate) fn for_stream(self) -> Self {
        // Only ever called on a budget just made by a server hop, before anyone else has it.
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => {
                inner.stream = Some(Arc::default());
                Self {
                    inner: Arc::new(inner),
                }
            }
            Err(inner) => Self { inner },
        }
    }

    /// The first chunk of a stream went out: from now on this budget and every child of it
    /// run until `now + lifetime` instead of the request deadline (rule C13, S12). Work spawned
    /// for the stream and calls made from it are then not cut at the request deadline.
    pub(crate) fn start_stream(&self, lifetime: Duration) {
        if let Some(stream) = &self.inner.stream {
            stream.set(Deadline::after(lifetime));
        }
    }

    fn build(
        deadline: Deadline,
        source: Source,
        policy: HopPolicy,
        parent: Option<&RequestBudget>,
        linked_from: Option<BudgetId>,
    ) -> Self {
        let mut parts = Parts::root(deadline, source, policy);
        parts.linked_from = linked_from;
        if let Some(parent) = parent {
            parts.depth = parent.inner.depth.saturating_add(1);
            parts.stream = parent.inner.stream.clone();
            parts.cap = parent.inner.cap;
            parts.parent = Some(parent.clone());
        }
        Self::from_parts(parts)
    }

    #[inline]
    fn from_parts(p: Parts) -> Self {
        // A server hop makes one budget per request and drops it when the answer is out:
        // reuse the last one's allocation when this thread has one (see `recycle`).
        let inner = match SPARE.try_with(Cell::take) {
            Ok(Some(mut spare)) => match Arc::get_mut(&mut spare) {
                Some(slot) => {
                    slot.reuse(p);
                    spare
                }
                None => Arc::new(Inner::new(p)),
            },
            _ => Arc::new(Inner::new(p)),
        };
        Self { inner }
    }

    /// Drop this budget, keeping its allocation for the next budget made on this thread when
    /// nothing else holds it and it owns nothing that should go now (a parent, a token, a
    /// stream deadline). The server layers call this as a request ends: a budget is made and
    /// dropped on every request, and the allocator's round trip was a tenth of the layer's
    /// cost per request.
    pub(crate) fn recycle(self) {
        let inner = &self.inner;
        if Arc::strong_count(inner) != 1
            || inner.parent.is_some()
            || inner.token.get().is_some()
            || inner.stream.is_some()
        {
            return;
        }
        let _ = SPARE.try_with(|spare| spare.set(Some(self.inner)));
    }

    /// This budget's id.
    ///
    /// See the [example](Self#examples).
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

    /// The deadline. On a stream route it moves once, to the stream lifetime, when the first
    /// chunk goes out (rule C13).
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
    /// whose kill switch is off (rule C24). Adapters that bound a wait or set a server-side
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
    /// negative (rule C2). Siblings launched together all get the same value (S8).
    ///
    /// See the [example](Self#examples).
    #[inline]
    pub fn forward(&self) -> Duration {
        self.remaining().saturating_sub(self.inner.policy.reserve())
    }

    /// Check that `cost` fits in the remaining budget before starting expensive local work
    /// (rule C3). Fails with [`BudgetError::Refused`] stating the required and remaining
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
    /// threshold (rule C3): no connection is opened and no byte sent for a refused call.
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

    /// The cause recorded on this budget or the nearest ancestor that has one, without
    /// recursion however deep the tree is.
    #[inline]
    pub(crate) fn recorded_cause(&self) -> Option<EndCause> {
        let own = self.inner.state.load(Ordering::Acquire);
        if own != LIVE {
            return Some(Self::cause_of(own));
        }
        if self.inner.depth >= WALK_DEPTH {
            // Every ancestor's end reaches this token in one step (tokio-util propagates
            // cancellation down its tree), so a live token means no ancestor has ended.
            if let Some(token) = self.inner.token.get() {
                if !token.is_cancelled() {
                    return None;
                }
            }
        }
        let mut next = self.inner.parent.as_ref();
        while let Some(ancestor) = next {
            let state = ancestor.inner.state.load(Ordering::Acquire);
            match state & CAUSE_BITS {
                LIVE => next = ancestor.inner.parent.as_ref(),
                CANCELLED => {
                    // A child with a tighter deadline that had passed before the ancestor was
                    // cancelled had expired, and stays expired (C4).
                    let before = Duration::from_nanos(state & NANOS_BITS);
                    let cancelled_at = ancestor.inner.deadline.saturating_sub(before);
                    return Some(if self.deadline() <= cancelled_at {
                        EndCause::Expired
                    } else {
                        EndCause::Cancelled
                    });
                }
                _ => return Some(EndCause::Expired),
            }
        }
        None
    }

    fn cause_of(state: u64) -> EndCause {
        if state & CAUSE_BITS == CANCELLED {
            EndCause::Cancelled
        } else {
            EndCause::Expired
        }
    }

    /// Whether the budget has ended (expired or cancelled).
    ///
    /// See the [example](Self#examples).
    pub fn is_done(&self) -> bool {
        self.end_cause().is_some()
    }

    /// Cancel this budget and everything under it: the caller went away (rule C5).
    ///
    /// If the deadline has already passed the cause is recorded as expired instead: a budget
    /// that ran out is never reported as cancelled (rule C4). Returns whether this call was the
    /// one that ended it.
    ///
    /// See the [example](Self#examples).
    pub fn cancel(&self) -> bool {
        self.cancel_at(tokio::time::Instant::now())
    }

    /// Whether this handle is the budget's only one and no token was ever made from it: then
    /// no child, task or waiter can observe how it ends, and a layer ending its request may
    /// skip recording the end (a compare-and-swap and a fence on every request). No new handle
    /// can appear meanwhile: making one needs this one, and without a token no timer holds a
    /// weak reference.
    pub(crate) fn is_unshared(&self) -> bool {
        Arc::strong_count(&self.inner) == 1 && self.inner.token.get().is_none()
    }

    /// [`cancel`](Self::cancel) with the clock already read: a server layer ending a request
    /// has `now` in hand, and one clock read per request end is enough.
    pub(crate) fn cancel_at(&self, now: tokio::time::Instant) -> bool {
        if now >= self.deadline().instant() {
            return self.end_with(EXPIRED);
        }
        // Recorded against the creation deadline, which never moves.
        let before = self.inner.deadline.remaining_at(now);
        let nanos = u64::try_from(before.as_nanos()).map_or(NANOS_BITS, |n| n.min(NANOS_BITS));
        self.end_with(CANCELLED | nanos)
    }

    /// Mark this budget expired and cancel everything under it (rule C7). Layers call this
    /// when their deadline timer fires; the budget's own timer does it for any token holder.
    ///
    /// See the [example](Self#examples).
    pub fn expire(&self) -> bool {
        self.end_with(EXPIRED)
    }

    fn end_with(&self, state: u64) -> bool {
        let won = self
            .inner
            .state
            .compare_exchange(LIVE, state, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        // Pairs with the fence in `init_token`: recording the cause and creating the token
        // are two stores each followed by a load of the other location (the store-buffer
        // pattern). Acquire/release alone lets both loads see the old values on weakly
        // ordered CPUs (and through x86's store buffer), leaving a token that is never
        // cancelled. With a SeqCst fence between store and load on both sides, at least one
        // side sees the other's store: either this `get` finds the token, or `init_token`
        // finds the cause.
        fence(Ordering::SeqCst);
        if let Some(token) = self.inner.token.get() {
            token.cancel();
        }
        won
    }

    /// A `CancellationToken` cancelled when this budget ends, for code that speaks tokio-util.
    /// It is a child of the parent budget's token, so cancellation flows down the tree, and it
    /// is cancelled at the deadline whether or not anyone awaits [`done`](Self::done) (rule
    /// C7): the first call arms a timer task for it on the current tokio runtime.
    ///
    /// See the [example](Self#examples).
    pub fn token(&self) -> CancellationToken {
        // A token asked for after the deadline is cancelled already (C7): the timer task that
        // would cancel it has not run yet, and code that checks `is_cancelled()` at once must
        // not start late work meanwhile. One clock read, only while the budget is live.
        if self.inner.policy.enforce
            && self.inner.state.load(Ordering::Acquire) == LIVE
            && self.deadline().is_expired()
        {
            self.end_with(EXPIRED);
        }
        if let Some(token) = self.inner.token.get() {
            return token.clone();
        }
        // Tokens are made from the top down; collect the ancestors that have none yet, without
        // recursion, so a chain of any depth costs no stack.
        let mut missing = vec![self];
        let mut next = self.inner.parent.as_ref();
        while let Some(ancestor) = next {
            if ancestor.inner.token.get().is_some() {
                break;
            }
            missing.push(ancestor);
            next = ancestor.inner.parent.as_ref();
        }
        for budget in missing.into_iter().rev() {
            budget.init_token();
        }
        self.inner
            .token
            .get()
            .cloned()
            .unwrap_or_else(CancellationToken::new)
    }

    /// Create this budget's token; the parent's already exists.
    fn init_token(&self) {
        let mut created = false;
        let token = self.inner.token.get_or_init(|| {
            created = true;
            match self.inner.parent.as_ref().and_then(|p| p.inner.token.get()) {
                Some(parent) => parent.child_token(),
                None => CancellationToken::new(),
            }
        });
        // See `end_with`: a cause recorded before the token existed still has to reach it.
        fence(Ordering::SeqCst);
        if self.inner.state.load(Ordering::Acquire) != LIVE {
            token.cancel();
            return;
        }
        if created && self.needs_own_timer() {
            self.arm_timer(token.clone());
        }
    }

    /// A child that shares its parent's deadline is cancelled by the parent's timer through
    /// the token tree; only a budget with a deadline of its own needs a timer.
    fn needs_own_timer(&self) -> bool {
        // Unenforced (C24): no timer ends the work at the deadline.
        if !self.inner.policy.enforce {
            return false;
        }
        match &self.inner.parent {
            None => true,
            Some(parent) => self.deadline() < parent.deadline(),
        }
    }

    /// Expire this budget at its deadline even if nobody awaits it (rule C7). The task holds
    /// only a weak reference, and ends as soon as the token is cancelled for any reason (the
    /// request completed, the caller went away), so finished requests leave no timers behind.
    /// Outside a tokio runtime there is nothing to run a timer on; `done()` still expires the
    /// budget for whoever awaits it.
    fn arm_timer(&self, token: CancellationToken) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let weak = Arc::downgrade(&self.inner);
        let mut at = self.deadline();
        runtime.spawn(async move {
            loop {
                tokio::select! {
                    biased;
                    () = token.cancelled() => return,
                    () = tokio::time::sleep_until(at.instant()) => {}
                }
                let Some(inner) = weak.upgrade() else {
                    // Nobody holds the budget any more, but the token may still be held.
                    token.cancel();
                    return;
                };
                let budget = RequestBudget { inner };
                let now_due = budget.deadline();
                if now_due.is_expired() {
                    budget.expire();
                    return;
                }
                // A stream route's deadline moved to the stream lifetime (C13).
                at = now_due;
            }
        });
    }

    /// Resolves when the budget ends, with the cause. When it is the deadline that ends it,
    /// the budget is marked expired and its tree cancelled (rule C7), so that spawned children
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
            let token = self.token();
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

    /// A fresh budget for background work started by this request (rule C12): rooted now,
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
    pub fn scope<F: Future>(&self, fut: F) -> crate::Scoped<F> {
        crate::Scoped::new(self.clone(), fut)
    }

    /// Make this budget the ambient one while `f` runs (synchronous code, blocking threads).
    ///
    /// See the [example](Self#examples).
    #[inline]
    pub fn sync_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        crate::ambient::enter(self, f)
    }

    /// The ambient budget of the current task, if any.
    ///
    /// See the [example](Self#examples).
    pub fn current() -> Option<RequestBudget> {
        crate::ambient::current()
    }

    /// Whether two handles share the same budget state.
    ///
    /// See the [example](Self#examples).
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

    #[test]
    fn a_recycled_budget_comes_back_as_a_new_one() {
        let old = budget(500);
        let old_id = old.id();
        old.expire();
        let at = Arc::as_ptr(&old.inner);
        old.recycle();
        let new = budget(80);
        assert_eq!(Arc::as_ptr(&new.inner), at, "the allocation was reused");
        // Nothing of the old budget shows through.
        assert_eq!(new.recorded_cause(), None);
        assert!(!new.token().is_cancelled());
        assert_ne!(new.id(), old_id);
        assert_eq!(new.at_arrival(), Duration::from_millis(80));
    }

    /// Whether this thread keeps a budget's allocation for the next one.
    fn spare_kept() -> bool {
        SPARE.with(|spare| {
            let kept = spare.take();
            let is = kept.is_some();
            spare.set(kept);
            is
        })
    }

    #[test]
    fn a_budget_held_elsewhere_or_owning_a_parent_is_not_recycled() {
        drop(SPARE.with(Cell::take));
        let held = budget(500);
        let other = held.clone();
        held.recycle();
        assert!(
            !spare_kept(),
            "a budget still held elsewhere was kept for reuse"
        );
        let _new = budget(80);
        assert_eq!(other.at_arrival(), Duration::from_millis(500));
        assert_eq!(other.recorded_cause(), None);

        let parent = budget(500);
        parent.child().recycle();
        assert!(!spare_kept(), "a child was kept, and its parent with it");
        let with_token = budget(500);
        let _token = with_token.token();
        with_token.recycle();
        assert!(!spare_kept(), "a budget with a token was kept");
        budget(500).recycle();
        assert!(spare_kept());
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

    /// C7: a token first asked for after the deadline is cancelled at once, before any timer
    /// task could run; so is an existing token whose timer has not fired yet.
    #[tokio::test(start_paused = true)]
    async fn token_taken_after_the_deadline_is_already_cancelled() {
        let b = budget(50);
        let child = b.child();
        tokio::time::advance(Duration::from_millis(60)).await;
        assert!(child.token().is_cancelled(), "a child's first token");
        assert!(b.token().is_cancelled(), "the budget's own first token");
        assert_eq!(
            b.end_cause(),
            Some(EndCause::Expired),
            "expiry, not cancellation"
        );
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

    /// On the real clock, where two reads differ: a budget with no deadline (C8) and a
    /// detached one (C12) start with exactly what they were given (#32, item 11).
    #[tokio::test]
    async fn fallback_and_detached_budgets_start_with_exactly_their_budget() {
        let fallback = RequestBudget::fallback(Duration::from_millis(1_500), HopPolicy::DEFAULT);
        assert_eq!(fallback.at_arrival(), Duration::from_millis(1_500));
        assert_eq!(fallback.source(), Source::Fallback);
        let detached = fallback.detach(Duration::from_millis(1_500));
        assert_eq!(detached.at_arrival(), Duration::from_millis(1_500));
    }

    #[tokio::test(start_paused = true)]
    async fn child_until_takes_the_tighter_deadline() {
        let b = budget(100);
        let c = b.child_until(Deadline::after(Duration::from_millis(40)));
        assert_eq!(c.remaining(), Duration::from_millis(40));
        let c = b.child_until(Deadline::after(Duration::from_millis(400)));
        assert_eq!(c.remaining(), Duration::from_millis(100));
    }

    /// C24: with the kill switch off, nothing ends the budget but a cancel, while its
    /// arithmetic (what is left, what to forward) is unchanged.
    #[tokio::test(start_paused = true)]
    async fn an_unenforced_budget_is_never_ended_by_its_deadline() {
        let off = HopPolicy {
            enforce: false,
            ..HopPolicy::DEFAULT
        };
        let b = RequestBudget::local(Duration::from_millis(50), off);
        let token = b.token();
        let child = b.child();
        let tight = b.child_until(Deadline::after(Duration::from_millis(20)));
        let (child_token, tight_token) = (child.token(), tight.token());
        assert!(
            !child.is_enforced() && !tight.is_enforced(),
            "children inherit it"
        );
        assert!(!b.detach(Duration::from_secs(1)).is_enforced());
        assert_eq!(b.forward(), Duration::from_millis(44));

        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !token.is_cancelled() && !child_token.is_cancelled() && !tight_token.is_cancelled()
        );
        assert_eq!((b.end_cause(), tight.end_cause()), (None, None));
        assert!(!b.is_done());
        assert!(
            !b.token().is_cancelled(),
            "a token taken late is not cancelled either"
        );
        assert_eq!(b.remaining(), Duration::ZERO);
        assert_eq!(b.admit(Duration::from_secs(1)), Ok(()));
        assert_eq!(b.admit_forward(), Ok(Duration::ZERO), "forwarded as spent");
        // `run` does not stop the work; `done` waits for a cancel only.
        let work = tokio::time::sleep(Duration::from_secs(5));
        assert_eq!(b.run(work).await, Ok(()));
        let waiter = tokio::spawn({
            let b = b.clone();
            async move { b.done().await }
        });
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!waiter.is_finished());
        // The caller going away still ends it (C5), past the deadline as expiry (C4).
        b.cancel();
        assert_eq!(waiter.await.unwrap(), EndCause::Expired);
        assert!(token.is_cancelled() && child_token.is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn c7_the_token_fires_at_the_deadline_with_nobody_awaiting() {
        let b = budget(50);
        let token = b.token();
        let child_token = b.child().token();
        tokio::time::sleep(Duration::from_millis(49)).await;
        assert!(!token.is_cancelled());
        tokio::time::sleep(Duration::from_millis(51)).await;
        assert!(
            token.is_cancelled(),
            "a 50 ms budget's token is cancelled by 100 ms"
        );
        assert!(child_token.is_cancelled());
        assert_eq!(b.end_cause(), Some(EndCause::Expired));
        // A tighter child has a timer of its own.
        let b = budget(1_000);
        let c = b.child_until(Deadline::after(Duration::from_millis(20)));
        let t = c.token();
        tokio::time::sleep(Duration::from_millis(21)).await;
        assert!(t.is_cancelled());
        assert!(!b.token().is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn finished_budgets_leave_no_timer_behind() {
        let b = budget(60_000);
        let _token = b.token();
        let before = tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks();
        assert_eq!(before, 1, "the deadline timer task");
        b.cancel();
        tokio::task::yield_now().await;
        tokio::task::yield_now().await;
        let after = tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks();
        assert_eq!(after, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn c4_a_child_that_expired_stays_expired_after_its_parent_is_cancelled() {
        let b = budget(1_000);
        let c = b.child_until(Deadline::after(Duration::from_millis(40)));
        tokio::time::advance(Duration::from_millis(100)).await;
        b.cancel();
        assert_eq!(b.end_cause(), Some(EndCause::Cancelled));
        assert_eq!(c.end_cause(), Some(EndCause::Expired));
        // A child whose deadline had not passed when the parent was cancelled is cancelled.
        let b = budget(1_000);
        let c = b.child_until(Deadline::after(Duration::from_millis(400)));
        tokio::time::advance(Duration::from_millis(100)).await;
        b.cancel();
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!(c.end_cause(), Some(EndCause::Cancelled));
    }

    #[tokio::test(start_paused = true)]
    async fn c13_a_stream_budget_and_its_children_move_to_the_stream_lifetime() {
        let b = budget(100).for_stream();
        let child = b.child();
        let capped = b.child_until(Deadline::after(Duration::from_millis(300)));
        let token = child.token();
        tokio::time::advance(Duration::from_millis(50)).await;
        b.start_stream(Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!token.is_cancelled(), "not cut at the request deadline");
        assert!(child.end_cause().is_none());
        assert_eq!(child.remaining(), Duration::from_millis(9_800));
        assert_eq!(
            capped.remaining(),
            Duration::from_millis(50),
            "own cap stays"
        );
        tokio::time::sleep(Duration::from_millis(9_800)).await;
        tokio::task::yield_now().await;
        assert!(token.is_cancelled(), "ends at the stream lifetime");
        assert_eq!(child.end_cause(), Some(EndCause::Expired));
    }

    #[test]
    fn a_chain_100_000_budgets_deep_needs_no_recursion() {
        // Run on a small stack: recursion per level would overflow it long before the end.
        std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    let root = budget(60_000);
                    let mut leaf = root.clone();
                    for _ in 0..100_000 {
                        leaf = leaf.child();
                    }
                    assert_eq!(leaf.end_cause(), None);
                    let token = leaf.token();
                    root.cancel();
                    assert!(token.is_cancelled());
                    assert_eq!(leaf.end_cause(), Some(EndCause::Cancelled));
                    drop(root);
                    drop(leaf);
                });
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
