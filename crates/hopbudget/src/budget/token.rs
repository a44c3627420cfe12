//! The lazy cancellation token: made on first use, a child of the parent's, and cancelled at
//! the deadline by the runtime's shared deadline timer once it has been handed out (rule
//! [C7](crate::contract#c7); the timer is in `timer.rs`).

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use tokio_util::sync::CancellationToken;

use super::RequestBudget;
use super::node::Inner;
use super::state::{LIVE, TokenSlot};
use super::timer::{Entry, Key, Timed, Timers};

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
    /// The token for a wait that carries its own timer (`done()`, the client layer's bound):
    /// made if need be, without joining the deadline timer.
    #[inline]
    pub(crate) fn waiting_token(&self) -> CancellationToken {
        match self.inner.token.get() {
            Some(token) => token.clone(),
            None => self.make_token(),
        }
    }

    /// This budget's token, made (with those of its ancestors that have none) if need be.
    pub(super) fn make_token(&self) -> CancellationToken {
        // The common case, a root or a child of a budget with a token, needs no list (the
        // list's allocation was a third of a client call's token).
        if self
            .inner
            .parent
            .as_ref()
            .is_none_or(|parent| parent.inner.token.get().is_some())
        {
            self.init_token();
        } else {
            self.make_ancestor_tokens();
        }
        self.inner
            .token
            .get()
            .cloned()
            .unwrap_or_else(CancellationToken::new)
    }

    /// Make the tokens of this budget and of its ancestors that have none.
    #[cold]
    fn make_ancestor_tokens(&self) {
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
    }

    /// Create this budget's token; the parent's already exists.
    fn init_token(&self) {
        let token = self.inner.token.get_or_init(|| {
            match self.inner.parent.as_ref().and_then(|p| p.inner.token.get()) {
                Some(parent) => parent.child_token(),
                None => CancellationToken::new(),
            }
        });
        // See `EndState::end`: a cause recorded before the token existed still has to reach it.
        self.inner
            .state
            .check_new_token::<OnceLock<CancellationToken>>(token);
    }

    /// A token was handed out: make sure a timer cancels it at the deadline even if nobody
    /// awaits it (rule [C7](crate::contract#c7)). A budget that shares its parent's deadline
    /// is covered by the parent's timer through the token tree, so the entry goes to the
    /// nearest ancestor whose deadline is this one's. Outside a tokio runtime there is nothing
    /// to run a timer on; `done()` still expires the budget for whoever awaits it.
    pub(super) fn arm_timer(&self) {
        if self.inner.timed.load(Ordering::Acquire) {
            return;
        }
        let mut owner = self;
        let mut covered = vec![];
        loop {
            // Unenforced (C24): no timer ends the work at the deadline.
            if !owner.inner.policy.enforce {
                return;
            }
            match &owner.inner.parent {
                Some(parent) if owner.deadline() >= parent.deadline() => {
                    covered.push(owner);
                    if parent.inner.timed.load(Ordering::Acquire) {
                        break;
                    }
                    owner = parent;
                }
                _ => {
                    if !owner.arm_own() {
                        return;
                    }
                    owner.inner.timed.store(true, Ordering::Release);
                    break;
                }
            }
        }
        for budget in covered {
            budget.inner.timed.store(true, Ordering::Release);
        }
    }

    /// Put this budget in the runtime's deadline timer, if it is live and not in already.
    fn arm_own(&self) -> bool {
        // Made above for this budget and every ancestor.
        let Some(token) = self.inner.token.get() else {
            return false;
        };
        self.inner.timer.arm(
            || self.inner.state.word() == LIVE,
            Timers::current,
            self.deadline().instant(),
            || Entry::new(Arc::downgrade(&self.inner) as _, token.clone()),
        )
    }
}

impl Timed for Inner {
    fn fire(self: Arc<Self>, key: Key<tokio::time::Instant>, entry: Entry) {
        let budget = RequestBudget { inner: self };
        if entry.token().is_cancelled() {
            // Ended, here or above (a child keeps the cause it has, C4): nothing to fire.
            budget.inner.timer.release();
            return;
        }
        let due = budget.deadline();
        if due.is_expired() {
            // Records the end, cancels the tree and releases the slot.
            budget.expire();
            return;
        }
        // A stream route's deadline moved to the stream lifetime (C13).
        budget.inner.timer.put_back(&key, due.instant(), entry);
    }
}
