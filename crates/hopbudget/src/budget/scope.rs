//! The ambient budget: the one [`RequestBudget::current`] returns while a scope is entered
//! (rule [C11](crate::contract#c11)).
//!
//! A thread-local slot, set for the extent of one poll or one synchronous call and restored
//! afterwards, as tokio's task-locals are. It is our own so that entering it is a `Cell`
//! swap inlined at the call site: the server layers enter it around every poll of every
//! handler and body, and tokio's `sync_scope` added a `RefCell` check and a move of the
//! caller's closure through a function that is not inlined.

use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use super::RequestBudget;

thread_local! {
    static CURRENT: Cell<Option<RequestBudget>> = const { Cell::new(None) };
}

/// Puts the budget that was ambient before back when a scope ends, also by unwinding.
struct Restore(Option<RequestBudget>);

impl Drop for Restore {
    fn drop(&mut self) {
        let before = self.0.take();
        // The slot is gone only while the thread itself is being torn down.
        let _ = CURRENT.try_with(|slot| slot.set(before));
    }
}

/// Run `f` with `budget` ambient.
#[inline]
pub(crate) fn enter<R>(budget: &RequestBudget, f: impl FnOnce() -> R) -> R {
    match CURRENT.try_with(|slot| slot.replace(Some(budget.clone()))) {
        Ok(before) => {
            let _restore = Restore(before);
            f()
        }
        // A thread-local destructor running after the slot was torn down.
        Err(_) => f(),
    }
}

/// The budget in `lent`, ambient until the returned guard is dropped (also by unwinding),
/// which takes it back out of the slot and puts the one before back in: moved, not cloned,
/// so no reference-count updates on the path every poll of a server layer takes. `lent` is
/// empty while the guard lives. A guard, not a closure: a poll's result and a request then move
/// straight to where they are used, not through a closure's captures and return value.
#[inline(always)]
pub(crate) fn lend(lent: &mut Option<RequestBudget>) -> Lent<'_> {
    let mut carried = lent.take();
    match CURRENT.try_with(|slot| slot.replace(carried.take())) {
        Ok(before) => Lent {
            lent: Some(lent),
            before,
        },
        // A thread-local destructor running after the slot was torn down: no scope.
        Err(_) => {
            *lent = carried;
            Lent {
                lent: None,
                before: None,
            }
        }
    }
}

/// See [`lend`].
pub(crate) struct Lent<'a> {
    /// Where the budget goes back to; `None` when no scope was entered.
    lent: Option<&'a mut Option<RequestBudget>>,
    before: Option<RequestBudget>,
}

impl Drop for Lent<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        let Some(lent) = self.lent.take() else { return };
        let before = self.before.take();
        if let Ok(ours) = CURRENT.try_with(|slot| slot.replace(before)) {
            *lent = ours;
        }
    }
}

/// The ambient budget, if a scope is entered on this thread.
#[inline]
pub(crate) fn current() -> Option<RequestBudget> {
    CURRENT
        .try_with(|slot| {
            let budget = slot.take();
            let copy = budget.clone();
            slot.set(budget);
            copy
        })
        .ok()
        .flatten()
}

pin_project! {
    /// A future polled, and dropped, with a budget ambient: what
    /// [`RequestBudget::scope`] returns.
    ///
    /// Like tokio's task-local futures it drops the inner future as soon as it completes,
    /// still inside the scope, and panics if polled again after that.
    ///
    /// See the [example](crate::RequestBudget#examples).
    #[must_use = "futures do nothing unless polled"]
    pub struct Scoped<F> {
        budget: RequestBudget,
        #[pin]
        fut: Option<F>,
    }

    impl<F> PinnedDrop for Scoped<F> {
        fn drop(this: Pin<&mut Self>) {
            let mut this = this.project();
            if this.fut.as_ref().as_pin_ref().is_some() {
                // The future's own clean-up still sees its budget.
                enter(this.budget, || this.fut.set(None));
            }
        }
    }
}

impl<F> Scoped<F> {
    pub(crate) fn new(budget: RequestBudget, fut: F) -> Self {
        Self {
            budget,
            fut: Some(fut),
        }
    }

    /// The budget this future runs under.
    ///
    /// See the [example](crate::RequestBudget#examples).
    pub fn budget(&self) -> &RequestBudget {
        &self.budget
    }
}

impl<F> fmt::Debug for Scoped<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scoped")
            .field("budget", &self.budget)
            .field("done", &self.fut.is_none())
            .finish()
    }
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let mut this = self.project();
        enter(this.budget, || {
            let Some(fut) = this.fut.as_mut().as_pin_mut() else {
                panic!("`Scoped` polled after completion");
            };
            let out = fut.poll(cx);
            if out.is_ready() {
                this.fut.set(None);
            }
            out
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn budget() -> RequestBudget {
        RequestBudget::local(Duration::from_secs(1), crate::budget::HopPolicy::DEFAULT)
    }

    #[test]
    fn nested_scopes_restore_the_outer_budget_also_on_panic() {
        let (outer, inner) = (budget(), budget());
        outer.sync_scope(|| {
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                inner.sync_scope(|| {
                    assert!(RequestBudget::current().unwrap().ptr_eq(&inner));
                    panic!("handler panicked");
                })
            }));
            assert!(caught.is_err());
            assert!(RequestBudget::current().unwrap().ptr_eq(&outer));
        });
        assert!(RequestBudget::current().is_none());
    }

    #[test]
    fn a_lent_budget_is_ambient_and_comes_back_also_on_panic() {
        let (outer, own) = (budget(), budget());
        let mut lent = Some(own.clone());
        outer.sync_scope(|| {
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let _lent = lend(&mut lent);
                assert!(RequestBudget::current().unwrap().ptr_eq(&own));
                panic!("handler panicked");
            }));
            assert!(caught.is_err());
            assert!(RequestBudget::current().unwrap().ptr_eq(&outer));
        });
        assert!(lent.expect("the budget came back").ptr_eq(&own));
        assert!(RequestBudget::current().is_none());
    }

    #[test]
    fn a_scoped_future_is_dropped_inside_its_scope() {
        struct SeesBudget(std::rc::Rc<Cell<bool>>);
        impl Drop for SeesBudget {
            fn drop(&mut self) {
                self.0.set(RequestBudget::current().is_some());
            }
        }
        let seen = std::rc::Rc::new(Cell::new(false));
        let held = SeesBudget(seen.clone());
        let fut = budget().scope(async move {
            let _held = held;
            std::future::pending::<()>().await;
        });
        drop(fut);
        assert!(seen.get(), "the future's drop ran without its budget");
        assert!(RequestBudget::current().is_none());
    }
}
