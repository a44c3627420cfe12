//! The deadline timer behind [`RequestBudget::token`](super::RequestBudget::token): one per
//! tokio runtime, shared by every budget that handed out a token, instead of a task per
//! token (#51 item 1, rule [C7](crate::contract#c7)).
//!
//! # Design
//!
//! - **Lazy.** A budget joins the timer only when a token is handed out
//!   ([`RequestBudget::token`](super::RequestBudget::token)): the only case where nobody may
//!   be waiting when the deadline comes. Waits that carry their own timer (`done()`, `run()`,
//!   the client layer's bound, the server futures) use the token without joining, so the
//!   server layer's deadline and the client bound cost no entry here at all.
//! - **One sleep per runtime.** The timer is a map of entries ordered by (deadline, arrival),
//!   each a weak reference to the budget and a clone of its token, and one driver task that
//!   sleeps on one [`Sleep`](tokio::time::Sleep) until the earliest entry. Joining costs a
//!   lock and an ordered insert; it spawns nothing and registers nothing with tokio.
//! - **It moves later on the common path.** A budget that joins with a deadline later than
//!   the one the driver sleeps until (every request with the same timeout, arriving in order)
//!   changes nothing in tokio. An entry that leaves (its budget ended) leaves the driver's
//!   sleep where it was: it wakes once, finds nothing due, and sleeps on, to a later instant.
//!   With no entry left the driver keeps its sleep set (or sets one for the instant the
//!   last entry woke it for), so budgets that come and go one after another wake it once, not
//!   once each; the price is at most one needless wake at that instant. Only an entry earlier
//!   than the driver's instant wakes it to move its sleep earlier, the case tokio charges for
//!   (a lock, perhaps a wake of its driver, tokio #5207); those moves are counted
//!   (`Wheel::earlier_moves`, read by the tests through `stats`).
//! - **Never late, never early.** The driver sleeps until the earliest entry's instant
//!   exactly, so an entry fires as a `sleep_until` of its own would (tokio's millisecond
//!   wheel, rounded up); it fires only entries whose instant has passed, and a budget whose
//!   deadline moved later meanwhile (a stream route, [C13](crate::contract#c13)) goes back in
//!   at its new deadline instead of expiring. No rounding to shared ticks: measurement did not
//!   ask for it (the entries are few: only budgets whose token was handed out).
//! - **Released.** A budget that ends (expired, cancelled) takes its entry out as it records
//!   the end. A budget dropped unended keeps its entry until its deadline, when the entry
//!   cancels the token it holds: a token outlives its budget and still fires (C7). A child
//!   ended only through its parent keeps its entry until its own deadline, when it fires
//!   nothing (its token is cancelled already) and goes.
//!
//! # Invariants (model-checked by loom in `loom/`, which compiles this file alone)
//!
//! 1. An end racing an arm never leaves an entry behind: the arm asks whether the budget is
//!    live under the slot's lock, and the end takes the slot's lock after recording itself.
//! 2. The driver never sleeps past an entry: an entry earlier than the instant it sleeps
//!    until wakes it, the instant and the waker being read and written under the map's lock.
//! 3. A popped entry put back for a moved deadline is not put back for a budget that ended
//!    meanwhile.
//!
//! Like `state.rs`, keep the part above the `#[cfg(not(all(loom, test)))]` items free of
//! `crate::` and `super::` paths.
//!
//! One file on purpose, over 500 lines: the timer's slots and its task keep one set of invariants,
//! read best side by side, and its paused-clock tests are a good part of it.

use std::collections::BTreeMap;
use std::task::Waker;

#[cfg(all(loom, test))]
use loom::sync::{Mutex, MutexGuard};
#[cfg(not(all(loom, test)))]
use std::sync::{Mutex, MutexGuard};

/// Where an entry sits: its instant, then the order it arrived in.
pub(super) type Key<K> = (K, u64);

#[inline]
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    #[cfg(not(all(loom, test)))]
    {
        m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
    #[cfg(all(loom, test))]
    {
        m.lock().unwrap()
    }
}

/// The entries of one timer and what its driver sleeps until.
pub(super) struct Wheel<K, V> {
    state: Mutex<WheelState<K, V>>,
}

struct WheelState<K, V> {
    entries: BTreeMap<Key<K>, V>,
    next: u64,
    /// The instant the driver sleeps until; `None` while it has nothing to wait for.
    target: Option<K>,
    /// Wakes the driver, for an entry earlier than `target`.
    driver: Option<Waker>,
    /// How many entries moved the driver's sleep earlier.
    earlier: u64,
}

impl<K: Ord + Copy, V> Wheel<K, V> {
    pub(super) fn new() -> Self {
        Self {
            state: Mutex::new(WheelState {
                entries: BTreeMap::new(),
                next: 0,
                target: None,
                driver: None,
                earlier: 0,
            }),
        }
    }

    /// Add an entry at `at`; wakes the driver only if `at` is earlier than what it sleeps
    /// until (or it sleeps on nothing).
    pub(super) fn insert(&self, at: K, value: V) -> Key<K> {
        let mut s = lock(&self.state);
        let key = (at, s.next);
        s.next += 1;
        s.entries.insert(key, value);
        let wake = match s.target {
            None => true,
            Some(target) => {
                let earlier = at < target;
                s.earlier += u64::from(earlier);
                earlier
            }
        };
        if wake {
            s.target = Some(at);
            if let Some(driver) = s.driver.take() {
                drop(s);
                driver.wake();
            }
        }
        key
    }

    /// Take an entry out, if it is still in.
    pub(super) fn remove(&self, key: &Key<K>) -> Option<V> {
        lock(&self.state).entries.remove(key)
    }

    /// For the driver: the earliest entry if it is due at `now`; else record that the driver
    /// sleeps until the earliest entry's instant, or with no entry until `pending` (the
    /// instant its sleep is still set for, if any, or the one it was last woken for),
    /// returns that instant, and is woken through `waker` for anything earlier. An entry later
    /// than that needs no wake: the driver wakes at that instant and sleeps on to the entry.
    pub(super) fn pop_due_or_park(
        &self,
        now: K,
        waker: &Waker,
        pending: Option<K>,
    ) -> Result<(Key<K>, V), Option<K>> {
        let mut s = lock(&self.state);
        let first = s.entries.first_key_value().map(|(key, _)| key.0);
        if let Some(first) = first {
            if first <= now {
                if let Some(entry) = s.entries.pop_first() {
                    return Ok(entry);
                }
            }
        }
        // With no entry, the driver keeps a sleep set: the one still pending, else one for
        // the instant an entry (gone since) last woke it for. A burst of budgets that come and
        // go before the driver runs then costs one wake, not one each: a later entry needs
        // none. An elapsed instant is no sleep.
        let first = first
            .or(pending)
            .or(s.target.filter(|target| *target > now));
        s.target = first;
        if !s.driver.as_ref().is_some_and(|w| w.will_wake(waker)) {
            s.driver = Some(waker.clone());
        }
        Err(first)
    }

    /// How many entries are in (for tests: `budget::timer_stats`).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        lock(&self.state).entries.len()
    }

    /// How many entries woke the driver to move its sleep earlier (for tests, as above).
    #[cfg(test)]
    pub(super) fn earlier_moves(&self) -> u64 {
        lock(&self.state).earlier
    }
}

/// What a budget's slot holds: a handle on the timer it joined.
pub(super) trait WheelRef<K> {
    type Value;
    fn wheel(&self) -> &Wheel<K, Self::Value>;
}

/// A budget's place in a timer, if it has one.
pub(super) struct TimerSlot<W, K>(Mutex<Option<(W, Key<K>)>>);

impl<W, K> std::fmt::Debug for TimerSlot<W, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimerSlot").finish_non_exhaustive()
    }
}

impl<W, K: Ord + Copy> TimerSlot<W, K> {
    pub(super) fn new() -> Self {
        Self(Mutex::new(None))
    }

    /// Join the timer `wheel()` at `at`, unless this budget is in already or has ended.
    /// `live` is asked under the slot's lock, which `release` takes after the end is recorded:
    /// an end racing this call either finds the entry or is seen here (invariant 1).
    /// Returns whether the budget is in.
    pub(super) fn arm(
        &self,
        live: impl FnOnce() -> bool,
        wheel: impl FnOnce() -> Option<W>,
        at: K,
        value: impl FnOnce() -> W::Value,
    ) -> bool
    where
        W: WheelRef<K>,
    {
        let mut slot = lock(&self.0);
        if slot.is_some() {
            return true;
        }
        if !live() {
            return false;
        }
        let Some(w) = wheel() else {
            return false;
        };
        let key = w.wheel().insert(at, value());
        *slot = Some((w, key));
        true
    }

    /// The budget ended: take its entry out, if it has one.
    pub(super) fn release(&self)
    where
        W: WheelRef<K>,
    {
        let taken = lock(&self.0).take();
        if let Some((w, key)) = taken {
            w.wheel().remove(&key);
        }
    }

    /// The driver popped `popped` and found the deadline moved later: put the entry back at
    /// `at`, unless the budget released it meanwhile (invariant 3).
    pub(super) fn put_back(&self, popped: &Key<K>, at: K, value: W::Value)
    where
        W: WheelRef<K>,
    {
        let mut slot = lock(&self.0);
        if let Some((w, key)) = slot.as_mut() {
            if key == popped {
                *key = w.wheel().insert(at, value);
            }
        }
    }

    /// The deadline moved to `at`: if that is earlier than the entry, move the entry there.
    /// (A later move needs nothing: the entry fires, finds the new deadline and goes back in.)
    pub(super) fn move_earlier(&self, at: K)
    where
        W: WheelRef<K>,
    {
        let mut slot = lock(&self.0);
        if let Some((w, key)) = slot.as_mut() {
            if at < key.0 {
                if let Some(value) = w.wheel().remove(key) {
                    *key = w.wheel().insert(at, value);
                }
            }
        }
    }
}

// What follows runs the timer on tokio; the loom harness compiles this file without it.

#[cfg(all(test, not(loom)))]
pub(super) use runtime::stats;
#[cfg(not(all(loom, test)))]
pub(super) use runtime::{Entry, Timed, Timers};

#[cfg(not(all(loom, test)))]
mod runtime {
    use std::cell::RefCell;
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex, PoisonError, Weak};
    use std::task::{Context, Poll};

    use pin_project_lite::pin_project;
    use tokio::runtime::{Handle, Id};
    use tokio::time::{Instant, Sleep};
    use tokio_util::sync::CancellationToken;

    use super::{Key, Wheel, WheelRef};

    /// What an armed budget does when its entry's instant comes. The timer holds each budget
    /// through this trait and names no budget type: the budget's allocation (`node.rs`) holds
    /// its slot in this timer, so naming it here would tie the two files in a loop. The one
    /// implementation is the budget's (`token.rs`, which arms it).
    pub(in crate::budget) trait Timed: Send + Sync {
        /// `entry`'s instant came and the budget is still held somewhere: expire it, or put
        /// `entry` back (at `key`'s place) when its deadline moved later.
        fn fire(self: Arc<Self>, key: Key<Instant>, entry: Entry);
    }

    /// One armed budget: a weak reference (the timer keeps no budget alive) and its token,
    /// which the timer cancels at the deadline if the budget is gone by then.
    pub(in crate::budget) struct Entry {
        budget: Weak<dyn Timed>,
        token: CancellationToken,
    }

    impl Entry {
        pub(in crate::budget) fn new(budget: Weak<dyn Timed>, token: CancellationToken) -> Self {
            Self { budget, token }
        }

        /// The token the entry cancels if its budget is gone at the deadline.
        pub(in crate::budget) fn token(&self) -> &CancellationToken {
            &self.token
        }
    }

    /// The timer of one tokio runtime.
    pub(in crate::budget) struct Timers {
        runtime: Id,
        /// Set when the driver task is dropped (its runtime shut down): a new one is made.
        closed: AtomicBool,
        wheel: Wheel<Instant, Entry>,
    }

    impl WheelRef<Instant> for Arc<Timers> {
        type Value = Entry;
        #[inline]
        fn wheel(&self) -> &Wheel<Instant, Entry> {
            &self.wheel
        }
    }

    thread_local! {
        /// The timer this thread used last, to skip the registry below.
        static LOCAL: RefCell<Option<Arc<Timers>>> = const { RefCell::new(None) };
    }

    /// Every runtime's timer, found by runtime id.
    static ALL: Mutex<Vec<Weak<Timers>>> = Mutex::new(Vec::new());

    impl Timers {
        /// The current runtime's timer, made (and its driver spawned) on first use; `None`
        /// outside a runtime, where `done()` still expires the budget for whoever awaits it.
        pub(in crate::budget) fn current() -> Option<Arc<Timers>> {
            let handle = Handle::try_current().ok()?;
            let id = handle.id();
            let usable = |t: &Arc<Timers>| t.runtime == id && !t.closed.load(Ordering::Acquire);
            let cached =
                LOCAL.try_with(|local| local.borrow().as_ref().filter(|t| usable(t)).cloned());
            if let Ok(Some(timers)) = cached {
                return Some(timers);
            }
            let timers = {
                let mut all = ALL.lock().unwrap_or_else(PoisonError::into_inner);
                all.retain(|t| {
                    t.upgrade()
                        .is_some_and(|t| !t.closed.load(Ordering::Acquire))
                });
                match all.iter().filter_map(Weak::upgrade).find(usable) {
                    Some(timers) => timers,
                    None => {
                        let timers = Arc::new(Timers {
                            runtime: id,
                            closed: AtomicBool::new(false),
                            wheel: Wheel::new(),
                        });
                        all.push(Arc::downgrade(&timers));
                        handle.spawn(Driver {
                            timers: timers.clone(),
                            sleep: None,
                            at: None,
                        });
                        timers
                    }
                }
            };
            let _ = LOCAL.try_with(|local| *local.borrow_mut() = Some(timers.clone()));
            Some(timers)
        }
    }

    /// What the current runtime's timer holds: (entries, moves of its sleep to an earlier
    /// instant).
    #[cfg(test)]
    pub(in crate::budget) fn stats() -> (usize, u64) {
        Timers::current().map_or((0, 0), |t| (t.wheel.len(), t.wheel.earlier_moves()))
    }

    /// An entry's instant came: cancel the token of a budget nobody holds any more, else let
    /// the budget expire or put the entry back ([`Timed::fire`]).
    fn fire(key: Key<Instant>, entry: Entry) {
        let Some(budget) = entry.budget.upgrade() else {
            // Nobody holds the budget any more, but the token may still be held (C7).
            entry.token.cancel();
            return;
        };
        budget.fire(key, entry);
    }

    pin_project! {
        /// The task that sleeps until a runtime's earliest entry.
        struct Driver {
            timers: Arc<Timers>,
            #[pin]
            sleep: Option<Sleep>,
            at: Option<Instant>,
        }

        impl PinnedDrop for Driver {
            fn drop(this: Pin<&mut Self>) {
                this.timers.closed.store(true, Ordering::Release);
            }
        }
    }

    impl Future for Driver {
        type Output = ();

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            let mut this = self.project();
            loop {
                let now = Instant::now();
                // The instant the sleep is still set for (none once it elapsed).
                let pending = *this.at;
                let target = loop {
                    match this.timers.wheel.pop_due_or_park(now, cx.waker(), pending) {
                        Ok((key, entry)) => fire(key, entry),
                        Err(target) => break target,
                    }
                };
                // Nothing to wait for, the sleep elapsed: the next entry wakes the driver.
                let Some(at) = target else {
                    return Poll::Pending;
                };
                match this.sleep.as_mut().as_pin_mut() {
                    // A later instant is a store in tokio; an earlier one moves the entry.
                    Some(sleep) if *this.at != Some(at) => sleep.reset(at),
                    Some(_) => {}
                    None => this.sleep.set(Some(tokio::time::sleep_until(at))),
                }
                *this.at = Some(at);
                if let Some(sleep) = this.sleep.as_mut().as_pin_mut() {
                    if sleep.poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                }
                // Elapsed: the next instant, even the same one, is set afresh.
                *this.at = None;
            }
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use std::future::poll_fn;
    use std::task::{Poll, Waker};

    use loom::sync::Arc;
    use loom::sync::atomic::{AtomicU64, Ordering};
    use loom::thread;

    use super::*;

    type TestWheel = Wheel<u64, u32>;

    impl WheelRef<u64> for Arc<TestWheel> {
        type Value = u32;
        fn wheel(&self) -> &TestWheel {
            self
        }
    }

    /// A budget as far as the timer sees it: its end word (0 while live) and its slot.
    struct Budget {
        word: AtomicU64,
        slot: TimerSlot<Arc<TestWheel>, u64>,
    }

    fn budget() -> Arc<Budget> {
        Arc::new(Budget {
            word: AtomicU64::new(0),
            slot: TimerSlot::new(),
        })
    }

    impl Budget {
        fn live(&self) -> bool {
            self.word.load(Ordering::Acquire) == 0
        }

        /// `end_with`: record the end, then leave the timer.
        fn end(&self) {
            let _ = self
                .word
                .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire);
            self.slot.release();
        }
    }

    /// Invariant 1: a token handed out while the budget ends.
    #[test]
    fn an_end_racing_an_arm_leaves_no_entry() {
        loom::model(|| {
            let wheel = Arc::new(TestWheel::new());
            let b = budget();
            let armer = thread::spawn({
                let (b, wheel) = (b.clone(), wheel.clone());
                move || b.slot.arm(|| b.live(), || Some(wheel), 10, || 1)
            });
            b.end();
            armer.join().unwrap();
            assert_eq!(wheel.len(), 0, "an ended budget left its entry");
        });
    }

    /// Invariant 2: an entry earlier than the driver's instant, added while the driver parks.
    #[test]
    fn an_earlier_entry_wakes_the_driver() {
        loom::model(|| {
            let wheel = Arc::new(TestWheel::new());
            wheel.insert(10, 1);
            let inserter = thread::spawn({
                let wheel = wheel.clone();
                move || {
                    wheel.insert(5, 2);
                    // A later one changes nothing for the driver.
                    wheel.insert(20, 3);
                }
            });
            // The driver at instant 0 ends up sleeping until 5 (a lost wake parks it forever,
            // which loom reports as a deadlock).
            loom::future::block_on(poll_fn(|cx| {
                match wheel.pop_due_or_park(0, cx.waker(), None) {
                    Ok(_) => unreachable!("nothing is due at 0"),
                    Err(Some(5)) => Poll::Ready(()),
                    Err(_) => Poll::Pending,
                }
            }));
            inserter.join().unwrap();
            assert!(wheel.earlier_moves() <= 1);
        });
    }

    /// Invariant 2 with no entry left and the driver's sleep still set for 10: an entry at 5
    /// wakes it, one at 20 need not (the sleep wakes it at 10 and it sleeps on to 20).
    #[test]
    fn with_no_entry_a_sleep_still_pending_stands_for_the_earliest() {
        loom::model(|| {
            let wheel = Arc::new(TestWheel::new());
            let inserter = thread::spawn({
                let wheel = wheel.clone();
                move || {
                    wheel.insert(20, 1);
                    wheel.insert(5, 2);
                }
            });
            loom::future::block_on(poll_fn(|cx| {
                match wheel.pop_due_or_park(0, cx.waker(), Some(10)) {
                    Ok(_) => unreachable!("nothing is due at 0"),
                    Err(Some(5)) => Poll::Ready(()),
                    Err(_) => Poll::Pending,
                }
            }));
            inserter.join().unwrap();
        });
    }

    /// Invariant 3: the driver puts back an entry whose deadline moved later (C13) while the
    /// budget ends.
    #[test]
    fn an_entry_put_back_for_a_moved_deadline_is_released_by_the_end() {
        loom::model(|| {
            let wheel = Arc::new(TestWheel::new());
            let b = budget();
            assert!(b.slot.arm(|| true, || Some(wheel.clone()), 10, || 1));
            let Ok((key, value)) = wheel.pop_due_or_park(10, Waker::noop(), None) else {
                panic!("the entry is due at 10");
            };
            let driver = thread::spawn({
                let b = b.clone();
                move || b.slot.put_back(&key, 20, value)
            });
            b.end();
            driver.join().unwrap();
            assert_eq!(wheel.len(), 0, "an ended budget left its entry");
        });
    }

    /// The harness can fail: asking whether the budget is live before taking the slot's lock
    /// (a copy, kept out of the code above) lets an end slip between the two.
    #[test]
    #[should_panic(expected = "left its entry")]
    fn asked_outside_the_lock_an_arm_leaks() {
        loom::model(|| {
            let wheel = Arc::new(TestWheel::new());
            let b = budget();
            let armer = thread::spawn({
                let (b, wheel) = (b.clone(), wheel.clone());
                move || {
                    let live = b.live();
                    b.slot.arm(|| live, || Some(wheel), 10, || 1)
                }
            });
            b.end();
            armer.join().unwrap();
            assert_eq!(wheel.len(), 0, "an ended budget left its entry");
        });
    }
}
