//! [`BudgetSemaphore`]: the admission decision inside a handler, around a connection pool or
//! a CPU-bound section, on the same waiter queue as [`AdmissionLayer`](super::AdmissionLayer).

use std::sync::Arc;
use std::time::Duration;

use super::QueuePolicy;
use super::queue::{Admit, Slot, WaitQueue};
use crate::error::BudgetError;
use crate::{budget::Deadline, budget::RequestBudget, error::EndCause};

/// A semaphore whose waiters are ordered and dropped by their budgets ([C21](crate::contract#c21)).
///
/// [`acquire`](Self::acquire) waits for a permit under the ambient budget
/// ([`RequestBudget::current`]). The wait ends with [`BudgetError::Refused`] (required and
/// remaining) at the instant the budget left no longer covers `cost`, without ever taking a
/// permit; with no ambient budget the caller waits in FIFO order and is never refused for
/// time. Waiters are served earliest-deadline-first unless another [`QueuePolicy`] is chosen.
/// A budget that has already ended waits for nothing, and a waiter whose budget is cancelled
/// while it waits leaves the queue at once with that cause, so the next free permit goes to a
/// live waiter. Dropping the `acquire` future leaves the queue at once; a permit never leaks.
///
/// Clones share the permits.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use hopbudget::admission::BudgetSemaphore;
/// use hopbudget::{BudgetError, HopPolicy, RequestBudget};
///
/// let pool = BudgetSemaphore::new(1);
/// let held = pool.acquire(Duration::from_millis(10)).await.unwrap();
///
/// // A query needing 30 ms, under a 100 ms budget, waits for the only connection...
/// let budget = RequestBudget::local(Duration::from_millis(100), HopPolicy::DEFAULT);
/// let waiting = budget.scope(pool.acquire(Duration::from_millis(30)));
/// // ...and is refused at 70 ms, when 30 ms remain: it could no longer finish in time.
/// let started = tokio::time::Instant::now();
/// match waiting.await {
///     Err(BudgetError::Refused(r)) => assert_eq!(r.required(), Duration::from_millis(30)),
///     other => panic!("{other:?}"),
/// }
/// assert_eq!(started.elapsed(), Duration::from_millis(70));
/// assert_eq!(pool.available_permits(), 0, "the connection is still held");
/// drop(held);
/// assert_eq!(pool.available_permits(), 1);
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct BudgetSemaphore {
    queue: Arc<WaitQueue>,
}

/// One permit of a [`BudgetSemaphore`]; dropping it hands the permit to the next waiter.
///
/// See the [example](BudgetSemaphore#examples).
#[derive(Debug)]
#[must_use = "the permit is released as soon as it is dropped"]
pub struct BudgetPermit {
    _slot: Slot,
}

impl BudgetSemaphore {
    /// The largest queue a semaphore made by [`new`](Self::new) holds.
    ///
    /// See the [example](Self#examples).
    pub const DEFAULT_QUEUE_BOUND: usize = 1024;

    /// `permits` permits, up to [`DEFAULT_QUEUE_BOUND`](Self::DEFAULT_QUEUE_BOUND) waiters,
    /// earliest-deadline-first.
    ///
    /// See the [example](Self#examples).
    pub fn new(permits: usize) -> Self {
        Self::with_queue(
            permits,
            Self::DEFAULT_QUEUE_BOUND,
            QueuePolicy::EarliestDeadlineFirst,
        )
    }

    /// `permits` permits, at most `queue_bound` waiters (beyond it `acquire` refuses at
    /// once), served by `policy`.
    ///
    /// See the [example](Self#examples).
    pub fn with_queue(permits: usize, queue_bound: usize, policy: QueuePolicy) -> Self {
        Self {
            queue: Arc::new(WaitQueue::new(permits, queue_bound, policy)),
        }
    }

    /// Wait for a permit for work that needs `cost`, under the ambient budget.
    ///
    /// See the [example](Self#examples).
    pub async fn acquire(&self, cost: Duration) -> Result<BudgetPermit, BudgetError> {
        match RequestBudget::current() {
            Some(budget) => self.acquire_with(&budget, cost).await,
            None => self.acquire_until(None, cost).await,
        }
    }

    /// Wait for a permit for work that needs `cost`, under `budget`.
    ///
    /// See the [example](Self#examples).
    pub async fn acquire_with(
        &self,
        budget: &RequestBudget,
        cost: Duration,
    ) -> Result<BudgetPermit, BudgetError> {
        // A cancelled budget waits for nothing; an expired one is caught by the queue's own
        // clock read, so the fast path reads the clock once.
        if let Some(cause) = budget.recorded_cause() {
            return Err(cause.into());
        }
        let slot = match self.queue.admit(Some(budget.deadline()), cost) {
            Admit::Granted(slot) => slot,
            Admit::Refused(e) => return Err(e),
            Admit::Queued(waiter) => {
                // A waiter whose budget is cancelled while it waits leaves the queue at once
                // (C21): its deadline may be the earliest, and the next freed slot would go
                // to work nobody wants ahead of a live waiter. The token is made only here,
                // when there is a wait to cut short.
                let token = budget.token();
                tokio::select! {
                    biased;
                    () = token.cancelled() => {
                        let cause = budget.end_cause().unwrap_or(EndCause::Cancelled);
                        return Err(cause.into());
                    }
                    granted = waiter => granted?,
                }
            }
        };
        Ok(BudgetPermit { _slot: slot })
    }

    /// Wait for a permit for work that needs `cost` and must end by `deadline` (`None`: no
    /// budget, FIFO, never refused for time).
    ///
    /// See the [example](Self#examples).
    pub async fn acquire_until(
        &self,
        deadline: Option<Deadline>,
        cost: Duration,
    ) -> Result<BudgetPermit, BudgetError> {
        let slot = match self.queue.admit(deadline, cost) {
            Admit::Granted(slot) => slot,
            Admit::Refused(e) => return Err(e),
            Admit::Queued(waiter) => waiter.await?,
        };
        Ok(BudgetPermit { _slot: slot })
    }

    /// Permits free right now.
    ///
    /// See the [example](Self#examples).
    pub fn available_permits(&self) -> usize {
        self.queue.available()
    }

    /// Callers waiting right now.
    ///
    /// See the [example](Self#examples).
    pub fn waiting(&self) -> usize {
        self.queue.waiting()
    }

    /// The number of permits.
    ///
    /// See the [example](Self#examples).
    pub fn limit(&self) -> usize {
        self.queue.limit()
    }
}
