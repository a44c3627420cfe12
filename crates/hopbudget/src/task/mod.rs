//! Carrying the budget across the places a request stops being a request (rule
//! [C11](crate::contract#c11)): `tokio::spawn`, `spawn_blocking`, and any future handed to other
//! code.
//!
//! Each helper takes the ambient budget, gives the new work a *child* of it (same deadline,
//! cancelled with the request, rule [C7](crate::contract#c7)) and installs that child as the
//! ambient budget inside the work. Spawned tasks are stopped when the budget ends, so nothing runs
//! as an orphan (rule [C5](crate::contract#c5)). Background work that must outlive the request uses
//! [`spawn_detached`] instead (rule [C12](crate::contract#c12)).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::budget::{HopPolicy, RequestBudget};
use crate::error::BudgetError;

/// Spawn a task that carries the ambient budget: it sees a child budget as its own ambient
/// budget and is stopped when that budget ends. Outside any budget it runs unbounded and
/// never fails; use [`spawn_with`] to bound it explicitly.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use hopbudget::{BudgetError, HopPolicy, RequestBudget};
///
/// let budget = RequestBudget::local(Duration::from_millis(100), HopPolicy::DEFAULT);
/// let handle = budget
///     .scope(async { hopbudget::spawn(tokio::time::sleep(Duration::from_secs(60))) })
///     .await;
/// // The spawned task is stopped at the request's deadline, not 60 s later.
/// assert_eq!(handle.await, Err(BudgetError::Expired));
/// # }
/// ```
pub fn spawn<F>(fut: F) -> TaskHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match RequestBudget::current() {
        Some(budget) => spawn_with(&budget, fut),
        None => TaskHandle::new(tokio::spawn(async move { Ok(fut.await) })),
    }
}

/// Spawn a task under a child of `budget`, stopped when it ends.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use hopbudget::{BudgetError, HopPolicy, RequestBudget};
///
/// let request = RequestBudget::local(Duration::from_secs(10), HopPolicy::DEFAULT);
/// let task = hopbudget::spawn_with(&request, tokio::time::sleep(Duration::from_secs(60)));
/// request.cancel(); // the caller went away: no orphan keeps running (C5)
/// assert_eq!(task.await, Err(BudgetError::Cancelled));
/// # }
/// ```
pub fn spawn_with<F>(budget: &RequestBudget, fut: F) -> TaskHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let child = budget.child();
    TaskHandle::new(tokio::spawn(async move { child.run(fut).await }))
}

/// Run blocking code on tokio's blocking pool with the ambient budget.
///
/// Blocking code cannot be interrupted, so the closure runs inside the budget's synchronous
/// scope: it can read [`RequestBudget::current`] and check [`RequestBudget::admit`] or
/// [`RequestBudget::is_done`] between steps. A job whose budget has ended before a blocking
/// thread picks it up is not run at all, and a job that finishes after its budget ended
/// reports the end cause rather than a result nobody is waiting for.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
/// use hopbudget::{BudgetError, HopPolicy, RequestBudget};
///
/// let request = RequestBudget::local(Duration::from_millis(100), HopPolicy::DEFAULT);
/// let job = request
///     .scope(async {
///         hopbudget::spawn_blocking(|| {
///             let budget = RequestBudget::current().expect("ambient in the blocking job");
///             budget.admit(Duration::from_secs(5))?; // too costly for what is left
///             Ok::<_, BudgetError>("priced")
///         })
///     })
///     .await;
/// // The job's own refusal, flattened with the budget's outcome into one result.
/// assert!(matches!(job.flatten().await, Err(BudgetError::Refused(_))));
/// # }
/// ```
pub fn spawn_blocking<F, R>(f: F) -> TaskHandle<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    let budget = RequestBudget::current().map(|b| b.child());
    TaskHandle::new(tokio::task::spawn_blocking(move || match budget {
        None => Ok(f()),
        Some(budget) => {
            if let Some(cause) = budget.end_cause() {
                return Err(cause.into());
            }
            let out = budget.sync_scope(f);
            match budget.end_cause() {
                Some(cause) => Err(cause.into()),
                None => Ok(out),
            }
        }
    }))
}

/// Spawn background work with a fresh budget rooted now (rule [C12](crate::contract#c12)): it is
/// not cancelled when the request that scheduled it ends, it stops at its own deadline, and its
/// span follows from the scheduling span so traces keep the link.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use hopbudget::{HopPolicy, RequestBudget};
///
/// let request = RequestBudget::local(Duration::from_millis(100), HopPolicy::DEFAULT);
/// let email = request
///     .scope(async {
///         hopbudget::spawn_detached(Duration::from_secs(30), async {
///             tokio::time::sleep(Duration::from_secs(2)).await; // send the e-mail
///             "sent"
///         })
///     })
///     .await;
/// request.cancel(); // the response went out; the request is over
/// assert_eq!(email.await, Ok("sent"));
/// # }
/// ```
pub fn spawn_detached<F>(budget: Duration, fut: F) -> TaskHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let detached = match RequestBudget::current() {
        Some(parent) => parent.detach(budget),
        None => RequestBudget::local(budget, HopPolicy::DEFAULT),
    };
    // A root span of its own: as a child it would keep the request's span (and its trace)
    // open until the background work ends. The link keeps the trace connection (C12).
    let span = tracing::info_span!(
        parent: None,
        "detached",
        deadline.source = "detached",
        deadline.remaining_ms = i64::try_from(budget.as_millis()).unwrap_or(i64::MAX),
        deadline.linked_from = detached
            .linked_from()
            .map(|id| i64::try_from(id.get()).unwrap_or(i64::MAX)),
    );
    span.follows_from(tracing::Span::current());
    TaskHandle::new(tokio::spawn(
        async move { detached.run(fut).await }.instrument(span),
    ))
}

pin_project! {
    /// The handle of a task spawned with [`spawn`], [`spawn_with`], [`spawn_blocking`] or
    /// [`spawn_detached`]. Awaiting it gives one flat result: the task's output, or the
    /// [`BudgetError`] that stopped it. A panic in the task is resumed in the task that awaits
    /// the handle, as `std::thread::scope` does; a task the runtime dropped at shutdown is
    /// `Cancelled`. Dropping the handle detaches the task, which the budget still bounds.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// use std::time::Duration;
    /// use hopbudget::{BudgetError, HopPolicy, RequestBudget};
    ///
    /// let budget = RequestBudget::local(Duration::from_millis(100), HopPolicy::DEFAULT);
    /// let quick: Result<u32, BudgetError> = budget.scope(async { hopbudget::spawn(async { 7 }) }).await.await;
    /// assert_eq!(quick, Ok(7));
    /// // A task that itself returns `Result<_, BudgetError>` flattens to the same shape.
    /// let checked = budget
    ///     .scope(async { hopbudget::spawn(async { RequestBudget::current().unwrap().admit(Duration::from_secs(1)) }) })
    ///     .await
    ///     .flatten()
    ///     .await;
    /// assert!(matches!(checked, Err(BudgetError::Refused(_))));
    ///
    /// // Stopping a task by hand reads as a cancellation.
    /// let slow = hopbudget::spawn_with(&budget, tokio::time::sleep(Duration::from_secs(60)));
    /// assert!(!slow.is_finished());
    /// slow.abort();
    /// assert_eq!(slow.await, Err(BudgetError::Cancelled));
    /// # }
    /// ```
    pub struct TaskHandle<T> {
        #[pin]
        join: JoinHandle<Result<T, BudgetError>>,
    }
}

impl<T> std::fmt::Debug for TaskHandle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskHandle")
            .field("finished", &self.join.is_finished())
            .finish()
    }
}

impl<T> TaskHandle<T> {
    fn new(join: JoinHandle<Result<T, BudgetError>>) -> Self {
        Self { join }
    }

    /// Stop the task now, as its budget's end would.
    ///
    /// See the [example](Self#examples).
    pub fn abort(&self) {
        self.join.abort();
    }

    /// Whether the task has finished.
    ///
    /// See the [example](Self#examples).
    pub fn is_finished(&self) -> bool {
        self.join.is_finished()
    }
}

impl<T, E> TaskHandle<Result<T, E>>
where
    E: From<BudgetError>,
{
    /// For a task that returns a `Result` itself: one result, the budget's error converted
    /// into the task's error type.
    ///
    /// See the [example](Self#examples).
    pub async fn flatten(self) -> Result<T, E> {
        self.await.map_err(E::from).and_then(|r| r)
    }
}

impl<T> Future for TaskHandle<T> {
    type Output = Result<T, BudgetError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match std::task::ready!(self.project().join.poll(cx)) {
            Ok(result) => Poll::Ready(result),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Aborted, or dropped by a runtime shutting down: stopped before its end.
            Err(_) => Poll::Ready(Err(BudgetError::Cancelled)),
        }
    }
}

pin_project! {
    /// A future that carries a budget into whatever polls it: what [`FutureExt`]'s methods
    /// return.
    ///
    /// See the [example](FutureExt#examples).
    #[must_use = "futures do nothing unless polled"]
    pub struct WithBudget<F: Future> {
        #[pin]
        inner: Carried<F>,
    }
}

pin_project! {
    // Private so the two ways of carrying are not part of the API.
    #[project = CarriedProj]
    enum Carried<F: Future> {
        Scoped { #[pin] fut: crate::budget::Scoped<F> },
        Plain { #[pin] fut: F },
    }
}

impl<F: Future> std::fmt::Debug for WithBudget<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.inner {
            Carried::Scoped { .. } => "WithBudget::Scoped",
            Carried::Plain { .. } => "WithBudget::Plain",
        })
    }
}

impl<F: Future> Future for WithBudget<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().inner.project() {
            CarriedProj::Scoped { fut } => fut.poll(cx),
            CarriedProj::Plain { fut } => fut.poll(cx),
        }
    }
}

/// Carry a budget into a future that will be polled elsewhere: another executor, a channel
/// of boxed futures, a library that spawns for you.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
/// use hopbudget::{FutureExt, HopPolicy, RequestBudget};
///
/// let budget = RequestBudget::local(Duration::from_millis(500), HopPolicy::DEFAULT);
/// // A plain tokio::spawn would lose the budget; the future carries it instead.
/// let explicit = tokio::spawn(async { RequestBudget::current().is_some() }.with_budget(&budget));
/// assert!(explicit.await.unwrap());
///
/// let captured = budget
///     .scope(async { async { RequestBudget::current().is_some() }.with_current_budget() })
///     .await;
/// assert!(tokio::spawn(captured).await.unwrap());
/// # }
/// ```
pub trait FutureExt: Future + Sized {
    /// Poll this future with `budget` as the ambient budget.
    ///
    /// See the [example](FutureExt#examples).
    fn with_budget(self, budget: &RequestBudget) -> WithBudget<Self> {
        WithBudget {
            inner: Carried::Scoped {
                fut: budget.scope(self),
            },
        }
    }

    /// Capture the ambient budget now and carry it into wherever this future is polled.
    ///
    /// See the [example](FutureExt#examples).
    fn with_current_budget(self) -> WithBudget<Self> {
        match RequestBudget::current() {
            Some(budget) => self.with_budget(&budget),
            None => WithBudget {
                inner: Carried::Plain { fut: self },
            },
        }
    }
}

impl<F: Future> FutureExt for F {}

#[cfg(test)]
mod tests;
