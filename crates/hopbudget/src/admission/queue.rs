//! The waiter queue behind both [`AdmissionLayer`](super::AdmissionLayer) and
//! [`BudgetSemaphore`](super::BudgetSemaphore): a fixed number of slots, and an ordered set
//! of waiters that are granted a slot, refused, or removed when their caller goes away ([C21](crate::contract#c21)).
//!
//! One mutex guards the free-slot count and the waiters. A slot is handed from the request
//! that releases it straight to the waiter chosen by the policy, so "a slot is free" and
//! "someone is waiting" are never true together, and a newcomer never overtakes the queue.
//! Waiters sit in a `BTreeMap` keyed by (deadline, arrival number) rather than a
//! `BinaryHeap`: a cancelled waiter removes its own entry at once in O(log n), so the queue
//! bound counts only live waiters and no dead entries pile up between releases. The same map
//! serves adaptive LIFO, keyed by arrival and popped from the other end.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use super::QueuePolicy;
use crate::budget::Deadline;
use crate::error::{BudgetError, Refused};

/// The slots and the waiters, shared by every clone of a layer or semaphore.
#[derive(Debug)]
pub(crate) struct WaitQueue {
    state: Mutex<State>,
    limit: usize,
    bound: usize,
    policy: QueuePolicy,
}

#[derive(Debug)]
struct State {
    available: usize,
    waiting: BTreeMap<Key, Entry>,
    next_seq: u64,
    /// Since when the queue has been non-empty without a break: adaptive LIFO's signal.
    queued_since: Option<Instant>,
}

/// Ordering of waiters: the instant first, the arrival number breaking ties (FIFO).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    at: Instant,
    seq: u64,
}

#[derive(Debug)]
struct Entry {
    node: Arc<Node>,
    /// `deadline - cost`: from this instant on the waiter cannot use a slot.
    refuse_at: Option<Instant>,
    waker: Option<Waker>,
}

const WAITING: u8 = 0;
const GRANTED: u8 = 1;
const REFUSED: u8 = 2;

/// What the releasing side tells a waiter. Written under the queue's lock; read without it
/// on the waiter's fast path.
#[derive(Debug)]
struct Node {
    state: AtomicU8,
}

/// The answer to a request for a slot.
#[derive(Debug)]
pub(crate) enum Admit {
    /// A slot was free.
    Granted(Slot),
    /// Refused at once: too little budget, or the queue is full.
    Refused(BudgetError),
    /// Queued: await the waiter.
    Queued(Waiter),
}

impl WaitQueue {
    pub(crate) fn new(limit: usize, bound: usize, policy: QueuePolicy) -> Self {
        Self {
            state: Mutex::new(State {
                available: limit,
                waiting: BTreeMap::new(),
                next_seq: 0,
                queued_since: None,
            }),
            limit,
            bound,
            policy,
        }
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Free slots right now.
    pub(crate) fn available(&self) -> usize {
        self.lock().available
    }

    /// Live waiters right now.
    pub(crate) fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the state half-changed in a way that
        // matters more than losing the queue, so a poisoned lock is simply taken over.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ask for a slot for work costing `cost` under `deadline` (`None`: no budget, admitted
    /// FIFO and never refused for time).
    pub(crate) fn admit(self: &Arc<Self>, deadline: Option<Deadline>, cost: Duration) -> Admit {
        let now = match deadline {
            Some(deadline) => {
                let now = Instant::now();
                let remaining = deadline.remaining_at(now);
                if remaining <= cost {
                    return Admit::Refused(refusal(remaining, cost));
                }
                Some(now)
            }
            None => None,
        };
        let mut state = self.lock();
        if state.available > 0 {
            state.available -= 1;
            drop(state);
            return Admit::Granted(Slot {
                queue: Some(self.clone()),
            });
        }
        let now = now.unwrap_or_else(Instant::now);
        if state.waiting.len() >= self.bound {
            drop(state);
            // The queue is full: refuse at once, stating the budget there was (none known
            // counts as zero).
            let remaining = deadline.map_or(Duration::ZERO, |d| d.remaining_at(now));
            return Admit::Refused(Refused::new(cost, remaining).into());
        }
        let seq = state.next_seq;
        state.next_seq += 1;
        let key = Key {
            // EDF orders by deadline; a waiter with no budget is ordered as if its deadline
            // were its arrival, so it is never starved by later arrivals. Adaptive LIFO orders
            // by arrival.
            at: match (self.policy, deadline) {
                (QueuePolicy::EarliestDeadlineFirst, Some(d)) => d.instant(),
                _ => now,
            },
            seq,
        };
        let refuse_at = deadline.map(|d| d.saturating_sub(cost).instant());
        let node = Arc::new(Node {
            state: AtomicU8::new(WAITING),
        });
        if state.waiting.is_empty() {
            state.queued_since = Some(now);
        }
        state.waiting.insert(
            key,
            Entry {
                node: node.clone(),
                refuse_at,
                waker: None,
            },
        );
        drop(state);
        Admit::Queued(Waiter {
            queue: self.clone(),
            key,
            node,
            deadline,
            cost,
            sleep: refuse_at.map(|at| Box::pin(tokio::time::sleep_until(at))),
            done: false,
        })
    }

    /// A slot came back: hand it to the waiter the policy picks, skipping (and refusing) any
    /// waiter whose budget can no longer cover its cost; free it if nobody can use it.
    fn release(&self) {
        let mut wake = Vec::new();
        {
            let mut state = self.lock();
            if state.waiting.is_empty() {
                state.available += 1;
                return;
            }
            let now = Instant::now();
            let lifo = match self.policy {
                QueuePolicy::AdaptiveLifo { after } => state
                    .queued_since
                    .is_some_and(|since| now.saturating_duration_since(since) >= after),
                QueuePolicy::EarliestDeadlineFirst => false,
            };
            loop {
                let next = if lifo {
                    state.waiting.pop_last()
                } else {
                    state.waiting.pop_first()
                };
                let Some((_, entry)) = next else {
                    state.available += 1;
                    break;
                };
                let granted = entry.refuse_at.is_none_or(|at| now < at);
                let to = if granted { GRANTED } else { REFUSED };
                entry.node.state.store(to, Ordering::Release);
                wake.extend(entry.waker);
                if granted {
                    break;
                }
            }
            if state.waiting.is_empty() {
                state.queued_since = None;
            }
        }
        // Wake outside the lock: a woken task on another thread would only block on it.
        for waker in wake {
            waker.wake();
        }
    }

    /// Remove a waiter that gave up or was refused by its own timer. Returns `false` when the
    /// waiter was no longer queued (it was granted or refused meanwhile).
    fn remove(&self, key: &Key) -> bool {
        let mut state = self.lock();
        let removed = state.waiting.remove(key).is_some();
        if state.waiting.is_empty() {
            state.queued_since = None;
        }
        removed
    }

    /// Store the waker a queued waiter will be woken with. Returns `false` when the waiter is
    /// no longer queued.
    fn register(&self, key: &Key, waker: &Waker) -> bool {
        let mut state = self.lock();
        match state.waiting.get_mut(key) {
            Some(entry) => {
                match &mut entry.waker {
                    Some(w) if w.will_wake(waker) => {}
                    slot => *slot = Some(waker.clone()),
                }
                true
            }
            None => false,
        }
    }
}

/// The error a waiter gets when its budget no longer covers `cost`: refused while budget
/// remains, expired once none does ([C4](crate::contract#c4)).
fn refusal(remaining: Duration, cost: Duration) -> BudgetError {
    if remaining.is_zero() {
        BudgetError::Expired
    } else {
        Refused::new(cost, remaining).into()
    }
}

/// One occupied slot; dropping it hands the slot on.
#[derive(Debug)]
pub(crate) struct Slot {
    queue: Option<Arc<WaitQueue>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(queue) = self.queue.take() {
            queue.release();
        }
    }
}

/// A queued request for a slot. Resolves to the slot, or to a refusal at `deadline - cost`.
/// Dropping it unresolved removes it from the queue, and gives back a slot it was granted but
/// had not yet taken.
#[derive(Debug)]
pub(crate) struct Waiter {
    queue: Arc<WaitQueue>,
    key: Key,
    node: Arc<Node>,
    deadline: Option<Deadline>,
    cost: Duration,
    /// Fires at `deadline - cost` ([C21](crate::contract#c21)): one timer per waiter, none without a budget.
    sleep: Option<Pin<Box<Sleep>>>,
    done: bool,
}

impl Waiter {
    fn settle(&mut self) -> Poll<Result<Slot, BudgetError>> {
        match self.node.state.load(Ordering::Acquire) {
            GRANTED => {
                self.done = true;
                Poll::Ready(Ok(Slot {
                    queue: Some(self.queue.clone()),
                }))
            }
            REFUSED => {
                self.done = true;
                Poll::Ready(Err(self.refused()))
            }
            _ => Poll::Pending,
        }
    }

    fn refused(&self) -> BudgetError {
        let remaining = self.deadline.map_or(Duration::ZERO, |d| d.remaining());
        refusal(remaining, self.cost)
    }
}

impl Future for Waiter {
    type Output = Result<Slot, BudgetError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if this.done {
            return Poll::Pending;
        }
        if let Poll::Ready(out) = this.settle() {
            return Poll::Ready(out);
        }
        if let Some(sleep) = this.sleep.as_mut()
            && sleep.as_mut().poll(cx).is_ready()
        {
            // The budget can no longer cover the cost: leave without taking a slot (C21).
            if this.queue.remove(&this.key) {
                this.done = true;
                return Poll::Ready(Err(this.refused()));
            }
            // Granted or refused by a release in the same instant: that decision stands.
            return this.settle();
        }
        if this.queue.register(&this.key, cx.waker()) {
            Poll::Pending
        } else {
            this.settle()
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // The caller went away (C5): leave the queue. If a slot was handed over meanwhile,
        // pass it on rather than leak it.
        if !self.queue.remove(&self.key) && self.node.state.load(Ordering::Acquire) == GRANTED {
            self.queue.release();
        }
    }
}
