//! Degrade instead of fail: take a cheaper path when the budget cannot pay for the full one.
//!
//! A propagated budget turns "this will be too slow" from a guess into a comparison. When the
//! time left is below what the full path costs, a service that has a cheaper answer (a cached
//! model, fewer results, no personalisation) can give that answer in time instead of starting
//! work it cannot finish (rule [C3](crate::contract#c3)) and failing at full cost. A [`Degrade`] names one such
//! place in a service; each decision is recorded on a `degrade` span (`degrade.choice`) and,
//! with the `metrics` feature, a cheaper path taken is counted in `hopbudget_degraded_total`
//! with labels `service`, `route` and `path` (rule [C14](crate::contract#c14)).
//!
//! See the example on [`Degrade`].
//!
//! Guide: *The database, the cache, and cheaper paths*, `docs/guide/database-and-cache.md` in the repository.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use crate::budget::RequestBudget;
use crate::observe::Counter;

/// Which path a [`Degrade`] chose.
///
/// See the [example](Degrade#examples).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Choice {
    /// The budget covers the full path's cost.
    Full,
    /// The budget is below the full path's cost (or has ended): take the cheaper path.
    Cheap,
}

impl Choice {
    /// `full` or `cheap`, as recorded in the `degrade.choice` span field.
    ///
    /// See the [example](Degrade#examples).
    pub const fn as_str(self) -> &'static str {
        match self {
            Choice::Full => "full",
            Choice::Cheap => "cheap",
        }
    }
}

/// One place in a service where a cheaper path can stand in for the full one.
///
/// Build it once (per route and path) and share it: the metric key is prepared at
/// construction, so a decision costs one clock read and, when it degrades, one counter update.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use hopbudget::degrade::{Choice, Degrade};
/// use hopbudget::{HopPolicy, RequestBudget};
///
/// // The reco-scorer's full model takes 180 ms; its stale cached model answers in 5 ms.
/// let stale_model = Degrade::new("reco-scorer", "/hopbudget.demo.Hop/Call", "stale-model");
/// let budget = RequestBudget::local(Duration::from_millis(120), HopPolicy::DEFAULT);
///
/// let (choice, scores) = stale_model
///     .run(
///         &budget,
///         Duration::from_millis(180),
///         || async { "fresh scores" },
///         || async { "stale scores" },
///     )
///     .await;
/// assert_eq!((choice, scores), (Choice::Cheap, "stale scores"));
/// assert_eq!((stale_model.path(), choice.as_str()), ("stale-model", "cheap"));
///
/// // Deciding without running: with the budget, or with the ambient one.
/// assert_eq!(stale_model.choose(&budget, Duration::from_millis(100)), Choice::Full);
/// let ambient = budget.scope(async { stale_model.choose_current(Duration::from_millis(180)) });
/// assert_eq!(ambient.await, Choice::Cheap);
/// assert_eq!(stale_model.choose_current(Duration::from_millis(180)), Choice::Full); // no budget
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Degrade {
    service: Arc<str>,
    route: Arc<str>,
    path: Arc<str>,
    counter: Counter,
}

impl Degrade {
    /// A degradation point of `service` on `route` whose cheaper path is called `path`
    /// (`stale-model`). All three become metric labels: keep them to a bounded set (rule [C20](crate::contract#c20)),
    /// never a raw request path or an id.
    ///
    /// See the [example](Degrade#examples).
    pub fn new(
        service: impl Into<Arc<str>>,
        route: impl Into<Arc<str>>,
        path: impl Into<Arc<str>>,
    ) -> Self {
        let (service, route, path) = (service.into(), route.into(), path.into());
        Self {
            counter: Counter::degraded(&service, &route, &path),
            service,
            route,
            path,
        }
    }

    /// The name of the cheaper path.
    ///
    /// See the [example](Degrade#examples).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Decide between the paths: [`Choice::Full`] when the remaining budget covers
    /// `full_cost`, [`Choice::Cheap`] otherwise (also when the budget has already ended).
    /// A cheap choice is counted and logged as an event in the current span.
    ///
    /// See the [example](Degrade#examples).
    pub fn choose(&self, budget: &RequestBudget, full_cost: Duration) -> Choice {
        let remaining = budget.remaining();
        let choice = decide(budget, full_cost);
        if choice == Choice::Cheap {
            self.count();
            tracing::debug!(
                degrade.path = %self.path,
                deadline.remaining_ms = ms(remaining),
                degrade.full_cost_ms = ms(full_cost),
                "budget below the full path's cost: taking the cheaper path"
            );
        }
        choice
    }

    /// Like [`choose`](Self::choose) with the ambient budget ([`RequestBudget::current`]);
    /// with no budget in scope there is nothing to save time for, and the full path is chosen.
    ///
    /// See the [example](Degrade#examples).
    pub fn choose_current(&self, full_cost: Duration) -> Choice {
        match RequestBudget::current() {
            Some(budget) => self.choose(&budget, full_cost),
            None => Choice::Full,
        }
    }

    /// Decide, then run only the chosen path inside a `degrade` span that records the choice
    /// (`degrade.choice`, `degrade.path`, `deadline.remaining_ms`, `degrade.full_cost_ms`).
    /// The path not chosen is never constructed. Returns the choice with the path's output.
    ///
    /// The chosen path runs as given: bound it with [`RequestBudget::run`] if it should stop
    /// at the deadline.
    ///
    /// See the [example](Degrade#examples).
    pub async fn run<T, F, FF, C, CF>(
        &self,
        budget: &RequestBudget,
        full_cost: Duration,
        full: F,
        cheap: C,
    ) -> (Choice, T)
    where
        F: FnOnce() -> FF,
        FF: Future<Output = T>,
        C: FnOnce() -> CF,
        CF: Future<Output = T>,
    {
        let remaining = budget.remaining();
        let choice = decide(budget, full_cost);
        let span = tracing::info_span!(
            "degrade",
            service.name = %self.service,
            degrade.route = %self.route,
            degrade.path = %self.path,
            degrade.choice = choice.as_str(),
            deadline.remaining_ms = ms(remaining),
            degrade.full_cost_ms = ms(full_cost),
        );
        match choice {
            Choice::Full => (choice, full().instrument(span).await),
            Choice::Cheap => {
                self.count();
                (choice, cheap().instrument(span).await)
            }
        }
    }

    fn count(&self) {
        self.counter.increment();
    }
}

fn decide(budget: &RequestBudget, full_cost: Duration) -> Choice {
    match budget.admit(full_cost) {
        Ok(()) => Choice::Full,
        Err(_) => Choice::Cheap,
    }
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::HopPolicy;

    fn budget(ms: u64) -> RequestBudget {
        RequestBudget::local(Duration::from_millis(ms), HopPolicy::DEFAULT)
    }

    #[tokio::test(start_paused = true)]
    async fn full_path_while_the_budget_covers_it_then_cheap() {
        let d = Degrade::new("svc", "/r", "cheap");
        let b = budget(200);
        assert_eq!(d.choose(&b, Duration::from_millis(180)), Choice::Full);
        assert_eq!(d.choose(&b, Duration::from_millis(200)), Choice::Full);
        tokio::time::advance(Duration::from_millis(21)).await;
        assert_eq!(d.choose(&b, Duration::from_millis(180)), Choice::Cheap);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(
            d.choose(&b, Duration::ZERO),
            Choice::Cheap,
            "an ended budget never picks the full path"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn run_builds_only_the_chosen_path() {
        let d = Degrade::new("svc", "/r", "cheap");
        let (choice, out) = d
            .run(
                &budget(100),
                Duration::from_millis(180),
                || -> std::future::Ready<&str> { panic!("the full path must not be built") },
                || async { "cheap" },
            )
            .await;
        assert_eq!((choice, out), (Choice::Cheap, "cheap"));
        let (choice, out) = d
            .run(
                &budget(500),
                Duration::from_millis(180),
                || async { "full" },
                || -> std::future::Ready<&str> { panic!("the cheap path must not be built") },
            )
            .await;
        assert_eq!((choice, out), (Choice::Full, "full"));
    }

    #[tokio::test(start_paused = true)]
    async fn no_ambient_budget_means_full() {
        let d = Degrade::new("svc", "/r", "cheap");
        assert_eq!(d.choose_current(Duration::from_secs(100)), Choice::Full);
        let b = budget(10);
        let c = b
            .scope(async { d.choose_current(Duration::from_millis(50)) })
            .await;
        assert_eq!(c, Choice::Cheap);
    }
}
