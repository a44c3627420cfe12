//! Fan-out: several siblings launched together under one shared deadline (scenario [S8](crate::contract#s8)).
//!
//! Siblings do not divide the budget; they all see the same remaining time. When the shared
//! deadline fires every sibling stops; with [`FanOutPolicy::CancelOnError`] the first sibling
//! to fail cancels the rest, which is the sideways cancellation hand-rolled fan-out tends to
//! forget.
//!
//! See the example on [`FanOut`].
//!
//! Guide: *Budgets, carriers and retries*, `docs/guide/concepts.md` in the repository.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;

use tokio::task::JoinSet;

use crate::budget::RequestBudget;
use crate::error::BudgetError;

/// What the other siblings do when one fails.
///
/// See the [example](FanOut#examples).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FanOutPolicy {
    /// Let the others finish (or run into the shared deadline).
    #[default]
    WaitAll,
    /// Cancel the others as soon as one returns an error.
    CancelOnError,
}

/// How one sibling ended when it did not succeed.
///
/// See the [example](FanOut#examples).
#[derive(Debug)]
#[non_exhaustive]
pub enum SiblingError<E> {
    /// The sibling's own error.
    Failed(E),
    /// The sibling was stopped by the budget: the shared deadline, the parent's cancellation,
    /// or a failed sibling under [`FanOutPolicy::CancelOnError`].
    Budget(BudgetError),
    /// The sibling panicked; the message is kept, the panic is not propagated.
    Panicked(String),
}

impl<E: fmt::Display> fmt::Display for SiblingError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SiblingError::Failed(e) => write!(f, "sibling failed: {e}"),
            SiblingError::Budget(e) => write!(f, "sibling stopped: {e}"),
            SiblingError::Panicked(m) => write!(f, "sibling panicked: {m}"),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for SiblingError<E> {}

/// A group of sibling tasks sharing one deadline.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use hopbudget::fan_out::{FanOut, FanOutPolicy};
/// use hopbudget::{HopPolicy, RequestBudget};
///
/// let request = RequestBudget::local(Duration::from_millis(420), HopPolicy::DEFAULT);
/// let mut group = FanOut::new(&request, FanOutPolicy::CancelOnError);
/// for name in ["cart", "pricing", "inventory"] {
///     group.spawn(move |budget| async move {
///         // Every sibling sees the same 420 ms, not a third of it.
///         Ok::<_, std::io::Error>((name, budget.remaining().as_millis()))
///     });
/// }
/// let results = group.join().await;
/// assert!(results.iter().all(|r| matches!(r, Ok((_, 420)))));
/// # }
/// ```
///
/// When one sibling fails under [`FanOutPolicy::CancelOnError`], the others are stopped:
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use hopbudget::fan_out::{FanOut, FanOutPolicy, SiblingError};
/// use hopbudget::{BudgetError, HopPolicy, RequestBudget};
///
/// let request = RequestBudget::local(Duration::from_secs(10), HopPolicy::DEFAULT);
/// let mut group = FanOut::<(), &str>::new(&request, FanOutPolicy::CancelOnError);
/// assert_eq!(group.budget().remaining(), Duration::from_secs(10));
/// group.spawn(|_| async { Err("inventory down") });
/// group.spawn(|_| async {
///     tokio::time::sleep(Duration::from_secs(5)).await;
///     Ok(())
/// });
/// let results = group.join().await;
/// assert!(matches!(results[0], Err(SiblingError::Failed("inventory down"))));
/// assert!(matches!(results[1], Err(SiblingError::Budget(BudgetError::Cancelled))));
/// # }
/// ```
#[derive(Debug)]
pub struct FanOut<T, E> {
    group: RequestBudget,
    policy: FanOutPolicy,
    tasks: JoinSet<(usize, Result<T, SiblingError<E>>)>,
    launched: usize,
    /// Which sibling each task is, so a panic (which loses the task's own output) is still
    /// reported in that sibling's slot.
    slots: HashMap<tokio::task::Id, usize>,
}

impl<T, E> FanOut<T, E>
where
    T: Send + 'static,
    E: Send + 'static,
{
    /// A new group under `parent`: cancelled when the parent is, sharing its deadline.
    ///
    /// See the [example](Self#examples).
    pub fn new(parent: &RequestBudget, policy: FanOutPolicy) -> Self {
        Self {
            group: parent.child(),
            policy,
            tasks: JoinSet::new(),
            launched: 0,
            slots: HashMap::new(),
        }
    }

    /// The group's budget, shared by all siblings.
    ///
    /// See the [example](Self#examples).
    pub fn budget(&self) -> &RequestBudget {
        &self.group
    }

    /// Launch a sibling. It receives its own budget (a child of the group's) and runs with it
    /// as the ambient budget.
    ///
    /// See the [example](Self#examples).
    pub fn spawn<F, Fut>(&mut self, f: F)
    where
        F: FnOnce(RequestBudget) -> Fut,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        let index = self.launched;
        self.launched += 1;
        let sibling = self.group.child();
        let fut = f(sibling.clone());
        let handle = self.tasks.spawn(async move {
            let result = match sibling.run(fut).await {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) => Err(SiblingError::Failed(e)),
                Err(stop) => Err(SiblingError::Budget(stop)),
            };
            (index, result)
        });
        self.slots.insert(handle.id(), index);
    }

    /// Wait for every sibling; results come back in launch order.
    ///
    /// See the [example](Self#examples).
    pub async fn join(mut self) -> Vec<Result<T, SiblingError<E>>> {
        let mut slots: Vec<Option<Result<T, SiblingError<E>>>> =
            (0..self.launched).map(|_| None).collect();
        while let Some(joined) = self.tasks.join_next().await {
            match joined {
                Ok((index, result)) => {
                    if matches!(result, Err(SiblingError::Failed(_)))
                        && self.policy == FanOutPolicy::CancelOnError
                    {
                        self.group.cancel();
                    }
                    if let Some(slot) = slots.get_mut(index) {
                        *slot = Some(result);
                    }
                }
                Err(join_error) => {
                    if self.policy == FanOutPolicy::CancelOnError {
                        self.group.cancel();
                    }
                    let index = self.slots.get(&join_error.id()).copied();
                    let result = Err(if join_error.is_panic() {
                        SiblingError::Panicked(panic_message(join_error.into_panic()))
                    } else {
                        SiblingError::Budget(BudgetError::Cancelled)
                    });
                    if let Some(slot) = index.and_then(|i| slots.get_mut(i)) {
                        *slot = Some(result);
                    }
                }
            }
        }
        slots
            .into_iter()
            .map(|s| s.unwrap_or_else(|| Err(SiblingError::Budget(BudgetError::Cancelled))))
            .collect()
    }
}

/// The text a panic was raised with, as `std` prints it.
fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(text) => *text,
        Err(payload) => match payload.downcast::<&'static str>() {
            Ok(text) => (*text).to_owned(),
            Err(_) => "a panic with a non-text payload".to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::budget::HopPolicy;

    fn budget(ms: u64) -> RequestBudget {
        RequestBudget::local(Duration::from_millis(ms), HopPolicy::DEFAULT)
    }

    #[tokio::test(start_paused = true)]
    async fn s8_siblings_share_the_deadline_and_all_stop_when_it_fires() {
        let request = budget(100);
        let live = Arc::new(AtomicUsize::new(0));
        let mut group = FanOut::<(), ()>::new(&request, FanOutPolicy::WaitAll);
        for _ in 0..3 {
            let live = live.clone();
            group.spawn(move |b| async move {
                assert_eq!(b.remaining(), Duration::from_millis(100));
                live.fetch_add(1, Ordering::SeqCst);
                let _guard = DecOnDrop(live);
                std::future::pending::<()>().await;
                Ok(())
            });
        }
        let started = tokio::time::Instant::now();
        let results = group.join().await;
        assert_eq!(started.elapsed(), Duration::from_millis(100));
        assert!(
            results
                .iter()
                .all(|r| matches!(r, Err(SiblingError::Budget(BudgetError::Expired))))
        );
        assert_eq!(live.load(Ordering::SeqCst), 0, "every sibling was stopped");
    }

    #[tokio::test(start_paused = true)]
    async fn s8_one_failure_cancels_the_others_by_policy() {
        let request = budget(10_000);
        let mut group = FanOut::<u32, &'static str>::new(&request, FanOutPolicy::CancelOnError);
        group.spawn(|_| async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            Err("inventory down")
        });
        group.spawn(|_| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok(1)
        });
        let started = tokio::time::Instant::now();
        let results = group.join().await;
        assert_eq!(started.elapsed(), Duration::from_millis(10));
        assert!(matches!(
            results[0],
            Err(SiblingError::Failed("inventory down"))
        ));
        assert!(matches!(
            results[1],
            Err(SiblingError::Budget(BudgetError::Cancelled))
        ));
        assert!(!request.is_done(), "the request itself goes on");
    }

    #[tokio::test(start_paused = true)]
    async fn wait_all_lets_siblings_finish_and_keeps_order() {
        let request = budget(10_000);
        let mut group = FanOut::<u32, &'static str>::new(&request, FanOutPolicy::WaitAll);
        group.spawn(|_| async {
            tokio::time::sleep(Duration::from_millis(30)).await;
            Ok(1)
        });
        group.spawn(|_| async { Err("fast failure") });
        group.spawn(|_| async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok(3)
        });
        let r = group.join().await;
        assert!(matches!(r[0], Ok(1)));
        assert!(matches!(r[1], Err(SiblingError::Failed("fast failure"))));
        assert!(matches!(r[2], Ok(3)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_sibling_is_reported_in_its_own_slot() {
        let request = budget(10_000);
        let mut group = FanOut::<u32, &'static str>::new(&request, FanOutPolicy::WaitAll);
        group.spawn(|_| async {
            tokio::time::sleep(Duration::from_millis(30)).await;
            Ok(1)
        });
        group.spawn(|_| async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            panic!("pricing exploded")
        });
        group.spawn(|_| async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok(3)
        });
        let r = group.join().await;
        assert!(matches!(r[0], Ok(1)));
        assert!(
            matches!(&r[1], Err(SiblingError::Panicked(m)) if m == "pricing exploded"),
            "{:?}",
            r[1]
        );
        assert!(matches!(r[2], Ok(3)));
    }

    struct DecOnDrop(Arc<AtomicUsize>);
    impl Drop for DecOnDrop {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }
}
