//! The end of a budget: one word recording *why* it ended, and the fences that let a
//! cancellation token created concurrently with the end still see it.
//!
//! # Invariants
//!
//! 1. The word goes from `LIVE` to an end exactly once (one compare-and-swap); the first
//!    cause stays. A cancel at or past the deadline is recorded as `EXPIRED` (rule [C4](crate::contract#c4)).
//! 2. Whoever sees a budget's token cancelled also sees its word (or an ancestor's) ended:
//!    the word is written before the token is cancelled, so `done()` never falls back to
//!    guessing the cause.
//! 3. A token created while the budget ends is cancelled: recording the end and creating the
//!    token are each a store followed by a load of the other location, with a SeqCst fence
//!    between on both sides (`end` and `check_new_token`), so at least one side sees the
//!    other's store.
//! 4. No child outlives its parent's end: a child's token is a child of the parent's, and a
//!    child walks up to the nearest ended ancestor (`recorded_cause`).
//!
//! Checked by loom in `loom/` at the repository root, which compiles this file alone as a
//! unit-test module with `--cfg loom`: keep it free of `crate::` and `super::` paths outside
//! the `#[cfg(not(all(loom, test)))]` items. Gated on `test` too, as tokio-util gates its own,
//! so that an application building its own loom tests (a global `--cfg loom`) still gets
//! std's atomics here.

#[cfg(all(loom, test))]
use loom::sync::atomic::{AtomicU64, Ordering, fence};
#[cfg(not(all(loom, test)))]
use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::time::Duration;

pub(super) const LIVE: u64 = 0;
pub(super) const EXPIRED: u64 = 1 << 62;
pub(super) const CANCELLED: u64 = 2 << 62;
pub(super) const CAUSE_BITS: u64 = 3 << 62;
pub(super) const NANOS_BITS: u64 = !CAUSE_BITS;

/// The word for a cancel: `None` when the deadline had passed (an expiry, rule [C4](crate::contract#c4)), else how
/// long before the budget's creation deadline it happened, saturating.
#[inline]
pub(super) fn cancel_word(before: Option<Duration>) -> u64 {
    match before {
        None => EXPIRED,
        Some(before) => {
            CANCELLED | u64::try_from(before.as_nanos()).map_or(NANOS_BITS, |n| n.min(NANOS_BITS))
        }
    }
}

/// Where a budget's cancellation token lives (a `OnceLock<CancellationToken>` in the crate,
/// a model in the loom checks).
pub(super) trait TokenSlot {
    type Token;
    fn token(&self) -> Option<&Self::Token>;
    fn cancel(token: &Self::Token);
}

#[derive(Debug)]
pub(super) struct EndState(AtomicU64);

impl EndState {
    pub(super) fn new() -> Self {
        Self(AtomicU64::new(LIVE))
    }

    /// Live again, for a recycled allocation nobody else holds.
    #[inline(always)]
    pub(super) fn reset(&mut self) {
        #[cfg(not(all(loom, test)))]
        {
            *self.0.get_mut() = LIVE;
        }
        #[cfg(all(loom, test))]
        self.0.with_mut(|w| *w = LIVE);
    }

    #[inline]
    pub(super) fn word(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Record `word` unless an end is recorded already, then cancel the token if there is one.
    /// Returns whether this call ended the budget.
    #[inline]
    pub(super) fn end<S: TokenSlot>(&self, word: u64, slot: &S) -> bool {
        let won = self
            .0
            .compare_exchange(LIVE, word, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        // Pairs with the fence in `check_new_token`: recording the cause and creating the token
        // are two stores each followed by a load of the other location (the store-buffer
        // pattern). Acquire/release alone lets both loads see the old values on weakly
        // ordered CPUs (and through x86's store buffer), leaving a token that is never
        // cancelled. With a SeqCst fence between store and load on both sides, at least one
        // side sees the other's store: either this `token()` finds the token, or
        // `check_new_token` finds the cause.
        fence(Ordering::SeqCst);
        if let Some(token) = slot.token() {
            S::cancel(token);
        }
        won
    }

    /// Just after a token was put in the slot: cancel it if an end was recorded meanwhile.
    /// Returns whether the budget is still live.
    #[inline]
    pub(super) fn check_new_token<S: TokenSlot>(&self, token: &S::Token) -> bool {
        fence(Ordering::SeqCst);
        if self.word() != LIVE {
            S::cancel(token);
            return false;
        }
        true
    }
}

// What follows needs the whole budget; the loom harness compiles this file without it.

#[cfg(not(all(loom, test)))]
use super::RequestBudget;
#[cfg(not(all(loom, test)))]
use crate::error::EndCause;

/// Below this depth a budget looks for an ancestor's end cause by walking up the tree; deeper
/// budgets (a task that respawns itself level after level) first ask their cancellation
/// token, which the tree's cancellation reaches in one step, so no check costs O(depth).
#[cfg(not(all(loom, test)))]
const WALK_DEPTH: u32 = 8;

#[cfg(not(all(loom, test)))]
impl RequestBudget {
    /// The cause recorded on this budget or the nearest ancestor that has one, without
    /// recursion however deep the tree is.
    #[inline]
    pub(crate) fn recorded_cause(&self) -> Option<EndCause> {
        let own = self.inner.state.word();
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
            let state = ancestor.inner.state.word();
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

    /// [`cancel`](Self::cancel) with the clock already read: a server layer ending a request
    /// has `now` in hand, and one clock read per request end is enough.
    pub(crate) fn cancel_at(&self, now: tokio::time::Instant) -> bool {
        // At or past the deadline a cancel is an expiry (C4); before it, it is recorded
        // against the creation deadline, which never moves.
        let before =
            (now < self.deadline().instant()).then(|| self.inner.deadline.remaining_at(now));
        self.end_with(cancel_word(before))
    }

    /// Record `word` and cancel the token if there is one (see `EndState::end`).
    #[inline]
    pub(super) fn end_with(&self, word: u64) -> bool {
        let won = self.inner.state.end(word, &self.inner.token);
        // An ended budget leaves its runtime's deadline timer (`timer.rs`, invariant 1: the
        // end is recorded before the slot is looked at). Only a budget whose token was handed
        // out is in it, so one without a token skips the lock.
        if won && self.inner.token.get().is_some() {
            self.inner.timer.release();
        }
        won
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;
    use loom::sync::atomic::AtomicBool;
    use loom::thread;

    /// tokio-util's token, as far as these checks need: cancelled on its own or through an
    /// ancestor; cancelling publishes (Release), asking observes (Acquire).
    #[derive(Debug)]
    struct Token {
        cancelled: AtomicBool,
        parent: Option<Arc<Token>>,
    }

    impl Token {
        fn is_cancelled(&self) -> bool {
            self.cancelled.load(Ordering::Acquire)
                || self.parent.as_ref().is_some_and(|p| p.is_cancelled())
        }
    }

    /// `OnceLock`'s publication: the value, then a Release store; `get` is an Acquire load.
    #[derive(Debug)]
    struct Slot {
        set: AtomicBool,
        token: Arc<Token>,
    }

    impl Slot {
        fn new(parent: Option<Arc<Token>>) -> Self {
            let cancelled = AtomicBool::new(false);
            let token = Arc::new(Token { cancelled, parent });
            Self {
                set: AtomicBool::new(false),
                token,
            }
        }

        fn init(&self) -> &Token {
            self.set.store(true, Ordering::Release);
            &self.token
        }
    }

    impl TokenSlot for Slot {
        type Token = Token;
        fn token(&self) -> Option<&Token> {
            self.set.load(Ordering::Acquire).then_some(&*self.token)
        }
        fn cancel(token: &Token) {
            token.cancelled.store(true, Ordering::Release);
        }
    }

    struct Budget {
        state: EndState,
        slot: Slot,
    }

    fn budget(parent: Option<&Budget>) -> Arc<Budget> {
        let parent = parent.map(|p| p.slot.token.clone());
        Arc::new(Budget {
            state: EndState::new(),
            slot: Slot::new(parent),
        })
    }

    /// Invariants 1 and 2: the timer's expiry races a caller going away after the deadline.
    #[test]
    fn a_cancel_racing_the_deadline_is_recorded_as_expiry() {
        loom::model(|| {
            let b = budget(None);
            b.slot.init();
            let timer = thread::spawn({
                let b = b.clone();
                move || b.state.end(EXPIRED, &b.slot)
            });
            let caller = thread::spawn({
                let b = b.clone();
                move || b.state.end(cancel_word(None), &b.slot)
            });
            // A waiter woken by the token (`done()`) finds the cause recorded.
            if b.slot.token.is_cancelled() {
                assert_eq!(b.state.word(), EXPIRED);
            }
            let (t, c) = (timer.join().unwrap(), caller.join().unwrap());
            assert!(t ^ c, "exactly one end is recorded");
            assert_eq!(b.state.word(), EXPIRED);
        });
    }

    /// Invariant 3: the SeqCst fence pairing in `end` and `check_new_token`.
    #[test]
    fn a_token_created_during_an_end_sees_it() {
        loom::model(|| {
            let b = budget(None);
            let ender = thread::spawn({
                let b = b.clone();
                move || {
                    b.state
                        .end(cancel_word(Some(Duration::from_millis(7))), &b.slot)
                }
            });
            let token = b.slot.init();
            b.state.check_new_token::<Slot>(token);
            ender.join().unwrap();
            assert!(token.is_cancelled(), "a token made during an end missed it");
        });
    }

    /// Invariant 4: a parent ends while its child makes its token.
    #[test]
    fn no_child_outlives_its_parents_end() {
        loom::model(|| {
            let parent = budget(None);
            parent.slot.init();
            let child = budget(Some(&parent));
            let ender = thread::spawn({
                let p = parent.clone();
                move || {
                    p.state
                        .end(cancel_word(Some(Duration::from_millis(3))), &p.slot)
                }
            });
            let maker = thread::spawn({
                let c = child.clone();
                move || {
                    let token = c.slot.init();
                    c.state.check_new_token::<Slot>(token);
                }
            });
            if child.slot.token.is_cancelled() {
                assert_ne!(parent.state.word(), LIVE, "a child ended before its parent");
            }
            ender.join().unwrap();
            maker.join().unwrap();
            assert!(child.slot.token.is_cancelled());
            assert_eq!(
                child.state.word(),
                LIVE,
                "the child's own word is untouched"
            );
        });
    }

    /// The harness can fail: without the two fences, loom finds the lost cancel of
    /// `a_token_created_during_an_end_sees_it` (a copy, kept out of the code above).
    #[test]
    #[should_panic(expected = "missed it")]
    fn without_the_fences_a_token_misses_the_end() {
        loom::model(|| {
            let b = budget(None);
            let ender = thread::spawn({
                let b = b.clone();
                move || {
                    let _ = b.state.0.compare_exchange(
                        LIVE,
                        EXPIRED,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    );
                    if let Some(t) = b.slot.token() {
                        Slot::cancel(t);
                    }
                }
            });
            let token = b.slot.init();
            if b.state.word() != LIVE {
                Slot::cancel(token);
            }
            ender.join().unwrap();
            assert!(token.is_cancelled(), "a token made during an end missed it");
        });
    }
}
