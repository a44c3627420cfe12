//! The end of a call's wait, shared by response futures and response bodies: the call's
//! deadline minus the hop margin (C2, S4), or the request's budget ending first (C5, C7).
//!
//! A response head that arrives in time does not end the wait: a server can send its headers
//! and then trickle the body for as long as it likes, so the body is bounded by the same end.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::time::Sleep;
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::outbound::ended;
use crate::{BudgetError, Deadline, RequestBudget};

/// Watches one call's wait; the timer and the cancellation future are made on the first
/// `Pending`, so a body that is already complete pays for neither.
pub(crate) struct Bound {
    budget: RequestBudget,
    watched: RequestBudget,
    wait_until: Deadline,
    sleep: Option<Pin<Box<Sleep>>>,
    cancelled: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
}

impl std::fmt::Debug for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bound")
            .field("budget", &self.budget)
            .field("wait_until", &self.wait_until)
            .finish_non_exhaustive()
    }
}

impl Bound {
    /// The wait of a call running under `budget` (perhaps narrowed to the call's own timeout),
    /// aborted when `watched` (the request's budget) ends, and over at `wait_until`.
    pub(crate) fn new(budget: RequestBudget, watched: RequestBudget, wait_until: Deadline) -> Self {
        Self {
            budget,
            watched,
            wait_until,
            sleep: None,
            cancelled: None,
        }
    }

    /// The budget the call runs under.
    #[cfg(feature = "reqwest")]
    pub(crate) fn budget(&self) -> &RequestBudget {
        &self.budget
    }

    /// Why the wait is over, if it is, without registering for a wake-up: checked before
    /// every body frame so that a body that never pauses cannot outrun its deadline.
    pub(crate) fn over_now(&self) -> Option<BudgetError> {
        // `budget` is `watched` or a child of it, so its end covers the request's end too.
        if self.budget.is_done() {
            return Some(self.cause());
        }
        self.wait_until.is_expired().then_some(BudgetError::Expired)
    }

    /// Resolves with the reason once the wait is over (C4: expired at the deadline; C5:
    /// cancelled, or the parent's recorded cause, when the request's budget ended first).
    pub(crate) fn poll_over(&mut self, cx: &mut Context<'_>) -> Poll<BudgetError> {
        let cancelled = self
            .cancelled
            .get_or_insert_with(|| Box::pin(self.watched.token().cancelled_owned()));
        if cancelled.as_mut().poll(cx).is_ready() {
            return Poll::Ready(self.cause());
        }
        let at = self.wait_until.instant();
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        if sleep.as_mut().poll(cx).is_ready() {
            return Poll::Ready(BudgetError::Expired);
        }
        Poll::Pending
    }

    fn cause(&self) -> BudgetError {
        // The narrowed budget knows whether its own deadline had passed before the parent was
        // cancelled (C4); without a recorded cause the parent's decides.
        match self.budget.end_cause() {
            Some(cause) => cause.into(),
            None => ended(&self.watched),
        }
    }
}
