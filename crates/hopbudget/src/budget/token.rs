//! The lazy cancellation token: made on first use, a child of the parent's, cancelled at the
//! deadline by a timer task that holds only a weak reference (rule [C7](crate::contract#c7)).

use std::sync::{Arc, OnceLock};

use tokio_util::sync::CancellationToken;

use super::RequestBudget;
use super::state::TokenSlot;

impl TokenSlot for OnceLock<CancellationToken> {
    type Token = CancellationToken;

    #[inline]
    fn token(&self) -> Option<&CancellationToken> {
        self.get()
    }

    #[inline]
    fn cancel(token: &CancellationToken) {
        token.cancel();
    }
}

impl RequestBudget {
    /// This budget's token, made (with those of its ancestors that have none) if need be.
    pub(super) fn make_token(&self) -> CancellationToken {
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
        // See `EndState::end`: a cause recorded before the token existed still has to reach it.
        if !self
            .inner
            .state
            .check_new_token::<OnceLock<CancellationToken>>(token)
        {
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

    /// Expire this budget at its deadline even if nobody awaits it (rule [C7](crate::contract#c7)). The task holds
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
}
