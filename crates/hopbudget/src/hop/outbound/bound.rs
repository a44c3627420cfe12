//! The end of a call's wait, shared by response futures and response bodies: the call's
//! deadline minus the hop margin ([C2](crate::contract#c2), [S4](crate::contract#s4)), or the request's budget ending first ([C5](crate::contract#c5), [C7](crate::contract#c7)).
//!
//! A response head that arrives in time does not end the wait: a server can send its headers
//! and then trickle the body for as long as it likes, so the body is bounded by the same end.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tokio::time::Sleep;
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::{Call, ended};
use crate::{budget::Deadline, budget::RequestBudget, error::BudgetError};

/// Watches one call's wait; the timer and the cancellation future are made on the first
/// `Pending`, so a body that is already complete pays for neither.
pub(crate) struct Bound {
    budget: RequestBudget,
    watched: RequestBudget,
    wait_until: Deadline,
    told: Deadline,
    // One allocation for both (#51): a `Bound` moves from the response future into the body
    // once it has waited, so what it registered cannot live in it in place.
    waits: Option<Pin<Box<Waits>>>,
}

pin_project! {
    /// What a wait registers: the request's cancellation, and the timer at the end of the
    /// wait (none while enforcement is off, [C24](crate::contract#c24)).
    struct Waits {
        #[pin]
        cancelled: WaitForCancellationFutureOwned,
        #[pin]
        sleep: Option<Sleep>,
    }
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
    /// The wait of `call`: it runs under `call.budget` (perhaps narrowed to the call's own
    /// timeout), is aborted when `call.watched` (the request's budget) ends, and is over at
    /// `call.wait_until`.
    pub(crate) fn new(call: &Call) -> Self {
        Self {
            budget: call.budget.clone(),
            watched: call.watched.clone(),
            wait_until: call.wait_until,
            told: call.told,
            waits: None,
        }
    }

    /// The budget the call runs under.
    pub(crate) fn budget(&self) -> &RequestBudget {
        &self.budget
    }

    /// The deadline the callee was told ([C4](crate::contract#c4): a `cancelled` answer after it is expiry).
    pub(crate) fn told(&self) -> Deadline {
        self.told
    }

    /// Why the wait is over, if it is, without registering for a wake-up: checked before
    /// every body frame so that a body that never pauses cannot outrun its deadline.
    pub(crate) fn over_now(&mut self) -> Option<BudgetError> {
        // `budget` is `watched` or a child of it, so its end covers the request's end too.
        if self.budget.is_done() {
            return Some(self.cause());
        }
        // Unenforced (C24): the wait ends only when the request's budget is cancelled.
        (self.budget.is_enforced() && self.wait_until.is_expired() && !self.moved_on())
            .then_some(BudgetError::Expired)
    }

    /// Whether the call's deadline moved later since the wait was planned: a stream route's
    /// budget runs for the stream lifetime once its first chunk is out ([C13](crate::contract#c13), [S12](crate::contract#s12)), and a call
    /// made from that stream keeps going with it. Updates the end of the wait if so.
    fn moved_on(&mut self) -> bool {
        let now_until = self
            .budget
            .deadline()
            .saturating_sub(self.budget.policy().hop_margin);
        if now_until > self.wait_until {
            self.wait_until = now_until;
            if let Some(waits) = self.waits.as_mut() {
                if let Some(sleep) = waits.as_mut().project().sleep.as_pin_mut() {
                    sleep.reset(now_until.instant());
                }
            }
            return true;
        }
        false
    }

    /// Resolves with the reason once the wait is over ([C4](crate::contract#c4): expired at the deadline; [C5](crate::contract#c5):
    /// cancelled, or the parent's recorded cause, when the request's budget ended first).
    pub(crate) fn poll_over(&mut self, cx: &mut Context<'_>) -> Poll<BudgetError> {
        let enforced = self.budget.is_enforced();
        loop {
            let at = self.wait_until.instant();
            let watched = &self.watched;
            let waits = self.waits.get_or_insert_with(|| {
                Box::pin(Waits {
                    // This wait has its own sleep: the token need not join the budget's
                    // deadline timer (#51).
                    cancelled: watched.waiting_token().cancelled_owned(),
                    sleep: None,
                })
            });
            let mut waits = waits.as_mut().project();
            if waits.cancelled.poll(cx).is_ready() {
                return Poll::Ready(self.cause());
            }
            if !enforced {
                // Unenforced (C24): no timer ends the wait; the cancellation above still does.
                return Poll::Pending;
            }
            if waits.sleep.is_none() {
                waits.sleep.set(Some(tokio::time::sleep_until(at)));
            }
            if let Some(sleep) = waits.sleep.as_pin_mut() {
                if sleep.poll(cx).is_pending() {
                    return Poll::Pending;
                }
            }
            if !self.moved_on() {
                return Poll::Ready(BudgetError::Expired);
            }
        }
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::budget::HopPolicy;

    fn bound_for(budget: &RequestBudget) -> Bound {
        let until = budget.deadline().saturating_sub(budget.policy().hop_margin);
        Bound::new(&Call {
            budget: budget.clone(),
            watched: budget.clone(),
            forward: budget.forward(),
            told: Deadline::after(budget.forward()),
            wait_until: until,
            trusted: true,
        })
    }

    async fn pending(bound: &mut Bound) -> bool {
        std::future::poll_fn(|cx| Poll::Ready(bound.poll_over(cx).is_pending())).await
    }

    #[tokio::test(start_paused = true)]
    async fn the_wait_ends_at_the_deadline_minus_the_margin_as_expired() {
        let budget = RequestBudget::local(Duration::from_millis(100), HopPolicy::DEFAULT);
        let mut bound = bound_for(&budget);
        assert!(bound.over_now().is_none());
        assert!(pending(&mut bound).await);
        tokio::time::advance(Duration::from_millis(95)).await;
        assert_eq!(bound.over_now(), Some(BudgetError::Expired));
        assert!(!pending(&mut bound).await);
    }

    /// #51 item 1: the bound's own sleep ends the wait; it puts the request's budget in no
    /// deadline timer (the token it watches is not handed out).
    #[tokio::test(start_paused = true)]
    async fn a_wait_joins_no_deadline_timer() {
        let budget = RequestBudget::local(Duration::from_millis(100), HopPolicy::DEFAULT);
        let mut bound = bound_for(&budget);
        assert!(pending(&mut bound).await);
        assert_eq!(crate::budget::timer_stats().0, 0);
        budget.cancel();
        assert!(!pending(&mut bound).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_request_ends_the_wait_as_cancelled() {
        let budget = RequestBudget::local(Duration::from_millis(100), HopPolicy::DEFAULT);
        let mut bound = bound_for(&budget);
        assert!(pending(&mut bound).await);
        budget.cancel();
        assert_eq!(bound.over_now(), Some(BudgetError::Cancelled));
        assert!(!pending(&mut bound).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_that_started_keeps_its_calls_open() {
        // C13, S12: a call made from a stream route's budget is not cut at the request
        // deadline once the stream is running.
        let budget =
            RequestBudget::local(Duration::from_millis(100), HopPolicy::DEFAULT).for_stream();
        let mut bound = bound_for(&budget);
        assert!(pending(&mut bound).await);
        budget.start_stream(Duration::from_secs(10));
        tokio::time::advance(Duration::from_millis(200)).await;
        assert!(bound.over_now().is_none());
        assert!(pending(&mut bound).await);
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(bound.over_now(), Some(BudgetError::Expired));
    }
}
