//! One budget's shared allocation: its fields, its parent link, the per-thread spare that a
//! server hop reuses, and the iterative drop that keeps deep chains off the stack.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::state::EndState;
use super::timer::{TimerSlot, Timers};
use super::{BudgetId, Deadline, HopPolicy, RequestBudget, Source};

#[derive(Debug)]
pub(super) struct Inner {
    /// Assigned on first use: most budgets never need one, and a process-wide counter
    /// touched by every request on every core is a contended cache line. Zero means unset.
    pub(super) id: AtomicU64,
    /// The deadline when the budget was made. It only moves for a stream route, after its
    /// first chunk (see `stream`).
    pub(super) deadline: Deadline,
    pub(super) source: Source,
    pub(super) at_arrival: Duration,
    pub(super) policy: HopPolicy,
    pub(super) state: EndState,
    pub(super) token: OnceLock<CancellationToken>,
    /// This budget's entry in its runtime's deadline timer, once a token was handed out
    /// (`timer.rs`).
    pub(super) timer: TimerSlot<Arc<Timers>, tokio::time::Instant>,
    /// Set once a timer covers this budget's deadline: its own entry, or an ancestor's with
    /// the same deadline. Spares handing out a token the walk up to that ancestor.
    pub(super) timed: AtomicBool,
    /// Cancellation flows from this parent (child budgets, fan-out siblings).
    pub(super) parent: Option<RequestBudget>,
    /// How many parents above this budget.
    pub(super) depth: u32,
    /// Detached work: the budget it was scheduled from, for tracing only (rule [C12](crate::contract#c12)).
    pub(super) linked_from: Option<BudgetId>,
    /// Stream routes only (rule [C13](crate::contract#c13)): set when the first chunk goes out, after which the
    /// stream lifetime replaces the request deadline for this budget and every child of it.
    pub(super) stream: Option<Arc<StreamDeadline>>,
    /// A tighter limit of this budget's own (`child_until`), which a stream's lifetime does
    /// not lift.
    pub(super) cap: Option<Deadline>,
}

/// The deadline a stream route's budget runs under once its first chunk is out (rule [C13](crate::contract#c13)).
#[derive(Debug, Default)]
pub(super) struct StreamDeadline(Mutex<Option<Deadline>>);

impl StreamDeadline {
    pub(super) fn get(&self) -> Option<Deadline> {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn set(&self, deadline: Deadline) {
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
            state: EndState::new(),
            token: OnceLock::new(),
            timer: TimerSlot::new(),
            timed: AtomicBool::new(false),
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
        self.state.reset();
        self.token = OnceLock::new();
        // A budget that handed out a token is never recycled, so its timer slot is empty.
        *self.timed.get_mut() = false;
        self.parent = parent;
        self.depth = depth;
        self.linked_from = linked_from;
        self.stream = stream;
        self.cap = cap;
    }
}

thread_local! {
    /// The allocation of the last budget a hop dropped on this thread, for the next one.
    pub(super) static SPARE: Cell<Option<Arc<Inner>>> = const { Cell::new(None) };
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
pub(super) struct Parts {
    pub(super) deadline: Deadline,
    pub(super) at_arrival: Duration,
    pub(super) source: Source,
    pub(super) policy: HopPolicy,
    pub(super) parent: Option<RequestBudget>,
    pub(super) depth: u32,
    pub(super) linked_from: Option<BudgetId>,
    pub(super) stream: Option<Arc<StreamDeadline>>,
    pub(super) cap: Option<Deadline>,
}

impl Parts {
    #[inline]
    pub(super) fn root(deadline: Deadline, source: Source, policy: HopPolicy) -> Self {
        Self::root_at(deadline, deadline.remaining(), source, policy)
    }

    /// A root whose budget at arrival the caller already knows (no clock read here).
    #[inline]
    pub(super) fn root_at(
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

impl RequestBudget {
    /// A budget for a request on a stream route (rule [C13](crate::contract#c13)): after its first chunk,
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
    /// run until `now + lifetime` instead of the request deadline (rule [C13](crate::contract#c13), [S12](crate::contract#s12)). Work spawned
    /// for the stream and calls made from it are then not cut at the request deadline.
    pub(crate) fn start_stream(&self, lifetime: Duration) {
        if let Some(stream) = &self.inner.stream {
            stream.set(Deadline::after(lifetime));
            // A lifetime shorter than what was left moves the deadline earlier: so does the
            // timer entry, if a token was handed out. A later one is found when it fires.
            self.inner.timer.move_earlier(self.deadline().instant());
        }
    }

    pub(super) fn build(
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
    pub(super) fn from_parts(p: Parts) -> Self {
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

    /// Whether this handle is the budget's only one and no token was ever made from it: then
    /// no child, task or waiter can observe how it ends, and a layer ending its request may
    /// skip recording the end (a compare-and-swap and a fence on every request). No new handle
    /// can appear meanwhile: making one needs this one, and without a token no timer holds a
    /// weak reference.
    pub(crate) fn is_unshared(&self) -> bool {
        Arc::strong_count(&self.inner) == 1 && self.inner.token.get().is_none()
    }
}
