//! Deadline-aware admission (rule [C21](crate::contract#c21), scenario [S17](crate::contract#s17)): at most `limit` requests do their work
//! at once, and the ones waiting for a slot are ordered and dropped by their budgets.
//!
//! A server that is past its capacity queues requests somewhere: for a worker, a connection,
//! a semaphore. tower's `ConcurrencyLimit` and `Buffer` serve that queue first-come
//! first-served and cannot see deadlines, so a request can wait past the point where its work
//! could still finish and then run anyway, spending a slot on an answer nobody will read.
//! [`AdmissionLayer`] (a tower layer) and [`BudgetSemaphore`] (the same decision inside a
//! handler) wait differently:
//!
//! - **Refused, not run, when time is short.** A request whose remaining budget no longer
//!   covers its route's cost is refused with [`BudgetError::Refused`](crate::BudgetError)
//!   (required and remaining), and never takes a slot. On arrival that is checked at once; a
//!   waiter arms one timer at `deadline - cost` and leaves at that exact instant. A start at
//!   that instant would end *at* the deadline, which already counts as expired ([C9](crate::contract#c9)), so a
//!   waiter needs strictly more than its cost to be granted a slot. A slot freed while
//!   waiters are queued skips every waiter that can no longer use it.
//! - **Earliest deadline first** ([`QueuePolicy::EarliestDeadlineFirst`], the default), ties
//!   in arrival order. The alternative, [`QueuePolicy::AdaptiveLifo`], serves arrivals in
//!   order until the queue has been non-empty for a while, then newest first, as Facebook's
//!   CoDel-plus-adaptive-LIFO servers do: under sustained overload the freshest requests,
//!   whose callers are still waiting, are served, and the deadline timers shed the rest.
//! - **Cancelled at once.** Dropping a waiting request (the client disconnected, the server
//!   layer's deadline fired) removes it from the queue; a slot it had just been handed is
//!   passed on, never leaked ([C5](crate::contract#c5)).
//! - **Bounded.** Beyond `queue_bound` waiters a newcomer is refused at once.
//!
//! The budget is the one in the request's extensions (the server layers put a
//! [`RequestBudget`] there), else the ambient [`RequestBudget::current`]. A request with no budget at all
//! is admitted in arrival order with no deadline logic: never refused for time, and ordered
//! as if its deadline were its arrival, so later arrivals never starve it.
//!
//! The cost of a route comes from the profile's `admission` section: `admission.routes[].cost_ms`,
//! else the route's `min_budget_ms`, else `refuse_below_ms` ([`AdmissionConfig`]).
//!
//! Make the cost an upper bound of the work (its p99), not a typical value. Past capacity
//! the queue is never empty, and EDF hands each freed slot to the waiter closest to its
//! refusal instant, so an admitted request starts with little more than the cost left: work
//! longer than the cost then expires half done and its slot time is lost. (In the demo's
//! checkout graph at 3x capacity, a cost at the bottleneck's median work let 3 in 10 admitted
//! requests expire, a third of its slot time; at the p99, none did.) The slot is
//! held until the inner service's future finishes (for HTTP, the response head).
//!
//! A dropped HTTP request is answered like the server layer's refusal: the profile's
//! `refused` status (503) with `Retry-After: 0`, `x-deadline-required-ms` and
//! `x-deadline-remaining-ms` ([`HttpAnswer`]); a dropped gRPC call like the gRPC server
//! layer's refusal, a trailers-only status (`GrpcAnswer`,
//! feature `grpc`, made by `AdmissionLayer::grpc_from_profile`). For other services
//! [`AdmissionLayer::with_errors`] returns the [`BudgetError`](crate::BudgetError) as the
//! service's error ([`ErrorAnswer`]); any other spelling is a [`RefusalAnswer`].
//!
//! Admission's protocol glue is here too, behind the protocol's feature: an `http::Request`
//! is an [`AdmissionRequest`] with feature `http` (`http.rs`), and the gRPC answer with
//! `grpc_from_profile` come with feature `grpc` (`grpc.rs`). The profile's `admission:` section
//! is the profile's own (`profile::AdmissionSpec`), resolved into an [`AdmissionConfig`].
//!
//! # Example
//!
//! The server layer goes outside, admission inside: the budget exists before the request
//! queues, and the deadline bounds the wait as well as the work.
//!
//! ```
//! # #[cfg(feature = "http")]
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use std::time::Duration;
//! use bytes::Bytes;
//! use http::{Request, Response};
//! use http_body_util::Full;
//! use hopbudget::Profile;
//! use hopbudget::admission::AdmissionLayer;
//! use hopbudget::http::server::ServerBudgetLayer;
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! // One slot; /tax needs 30 ms of budget to be worth starting.
//! let profile = Profile::from_yaml(
//!     "admission: {limit: 1, routes: [{path: /tax, cost_ms: 30}]}",
//!     "inline",
//! )?;
//! let service = ServiceBuilder::new()
//!     .layer(ServerBudgetLayer::new(profile.clone()))
//!     .layer(AdmissionLayer::from_profile(&profile).expect("has an admission section"))
//!     .service_fn(|_req: Request<Full<Bytes>>| async {
//!         tokio::time::sleep(Duration::from_millis(50)).await;
//!         Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from("ok"))))
//!     });
//! let get = |budget_ms: &str| {
//!     Request::get("/tax")
//!         .header("x-request-timeout-ms", budget_ms)
//!         .body(Full::new(Bytes::new()))
//! };
//!
//! // The first request takes the slot for 50 ms.
//! let first = tokio::spawn(service.clone().oneshot(get("500")?));
//! tokio::task::yield_now().await;
//!
//! // The second has 60 ms: it waits, and at 30 ms, when only its cost is left, it is
//! // refused without ever taking the slot.
//! let started = tokio::time::Instant::now();
//! let res = service.clone().oneshot(get("60")?).await?;
//! assert_eq!(started.elapsed(), Duration::from_millis(30));
//! assert_eq!(res.status(), 503);
//! assert_eq!(res.headers()["retry-after"], "0");
//! assert_eq!(res.headers()["x-deadline-required-ms"], "30");
//! assert_eq!(res.headers()["x-deadline-remaining-ms"], "30");
//!
//! assert_eq!(first.await??.status(), 200);
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "http"))]
//! # fn main() {}
//! ```
//!
//! Guide: *Admission under overload*, `docs/guide/admission.md` in the repository.

mod future;
#[cfg(feature = "grpc")]
pub(crate) mod grpc;
#[cfg(feature = "http")]
mod http;
mod layer;
mod queue;
mod refusal;
mod semaphore;
mod service;

use std::time::Duration;

pub use future::ResponseFuture;
pub use layer::AdmissionLayer;
pub use refusal::{ErrorAnswer, HttpAnswer, RefusalAnswer};
pub use semaphore::{BudgetPermit, BudgetSemaphore};
pub use service::Admission;

use crate::{budget::Deadline, budget::RequestBudget};

#[cfg(test)]
mod tests;

/// In which order waiters get a freed slot.
///
/// Set with [`AdmissionConfig::with_policy`], [`BudgetSemaphore::with_queue`] or the
/// profile's `admission.policy` (`edf`, or `adaptive-lifo` with `admission.lifo_after_ms`).
///
/// # Examples
///
/// Three callers queue for the one permit, in the order a (3 s budget), b (1 s), c (2 s),
/// and the permit comes back after 100 ms:
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use hopbudget::admission::{BudgetSemaphore, QueuePolicy};
/// use hopbudget::{HopPolicy, RequestBudget};
///
/// async fn served(policy: QueuePolicy) -> Vec<&'static str> {
///     let pool = BudgetSemaphore::with_queue(1, 16, policy);
///     let held = pool.acquire(Duration::ZERO).await.unwrap();
///     let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
///     for (name, secs) in [("a", 3), ("b", 1), ("c", 2)] {
///         let (pool, tx) = (pool.clone(), tx.clone());
///         let budget = RequestBudget::local(Duration::from_secs(secs), HopPolicy::DEFAULT);
///         tokio::spawn(async move {
///             let _permit = pool.acquire_with(&budget, Duration::ZERO).await.unwrap();
///             tx.send(name).unwrap();
///         });
///         tokio::task::yield_now().await; // let it queue before the next one arrives
///     }
///     assert_eq!(pool.waiting(), 3);
///     tokio::time::sleep(Duration::from_millis(100)).await;
///     drop(held);
///     drop(tx);
///     let mut order = Vec::new();
///     while let Some(name) = rx.recv().await {
///         order.push(name);
///     }
///     order
/// }
///
/// // The default: the earliest deadline first.
/// assert_eq!(served(QueuePolicy::default()).await, ["b", "c", "a"]);
/// // Adaptive LIFO, queue non-empty for less than `after`: arrival order.
/// let patient = QueuePolicy::AdaptiveLifo { after: Duration::from_secs(1) };
/// assert_eq!(served(patient).await, ["a", "b", "c"]);
/// // Queue non-empty for longer than `after`: the newest first.
/// let overloaded = QueuePolicy::AdaptiveLifo { after: Duration::from_millis(50) };
/// assert_eq!(served(overloaded).await, ["c", "b", "a"]);
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QueuePolicy {
    /// Earliest deadline first; equal deadlines in arrival order ([C21](crate::contract#c21)). The default.
    #[default]
    EarliestDeadlineFirst,
    /// Arrival order while queueing is brief; newest first once the queue has been non-empty
    /// for `after` without a break, until it empties again (adaptive LIFO). Deadlines still
    /// drop waiters that can no longer finish.
    AdaptiveLifo {
        /// How long the queue must stay non-empty before the newest waiter is served first.
        after: Duration,
    },
}

/// How many requests run at once, how many may wait, in which order, and what each route's
/// work costs. Usually from the profile's `admission` section
/// ([`Profile::admission`](crate::Profile::admission)).
///
/// # Examples
///
/// Built in code, the same configuration as the profile's `admission` section below, then
/// handed to [`AdmissionLayer::new`] (or [`BudgetSemaphore::with_queue`]):
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use hopbudget::Profile;
/// use hopbudget::admission::{AdmissionConfig, AdmissionLayer, QueuePolicy};
///
/// let config = AdmissionConfig::new(8)
///     .with_queue_bound(32)
///     .with_policy(QueuePolicy::AdaptiveLifo { after: Duration::from_millis(40) })
///     // Any route no rule names: the profile's `refuse_below_ms` (10 ms by default).
///     .with_cost(Duration::from_millis(10))
///     .with_route("/quote/*", Duration::from_millis(25))
///     .with_route("/tax", Duration::from_millis(200));
///
/// assert_eq!(config.limit(), 8);
/// assert_eq!(config.queue_bound(), 32);
/// assert_eq!(config.cost_for(Some("/quote/eu")), Duration::from_millis(25));
/// assert_eq!(config.cost_for(Some("/tax")), Duration::from_millis(200));
/// assert_eq!(config.cost_for(Some("/other")), Duration::from_millis(10));
/// assert_eq!(config.cost_for(None), Duration::from_millis(10));
/// assert_eq!(AdmissionConfig::new(8).queue_bound(), AdmissionConfig::DEFAULT_QUEUE_BOUND);
///
/// // A route's `min_budget_ms` is its cost unless `admission.routes` names it.
/// let profile = Profile::from_yaml(
///     "routes: [{path: /tax, min_budget_ms: 200}]
/// admission:
///   limit: 8
///   queue_bound: 32
///   policy: adaptive-lifo
///   lifo_after_ms: 40
///   routes: [{path: /quote/*, cost_ms: 25}]",
///     "inline",
/// )?;
/// let from_profile = profile.admission().expect("has an admission section");
/// for route in ["/quote/eu", "/tax", "/other"] {
///     assert_eq!(from_profile.cost_for(Some(route)), config.cost_for(Some(route)));
/// }
/// assert_eq!(from_profile.policy(), config.policy());
///
/// let layer = AdmissionLayer::new(config);
/// assert_eq!(layer.available(), 8);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdmissionConfig {
    limit: usize,
    queue_bound: usize,
    policy: QueuePolicy,
    default_cost: Duration,
    routes: Vec<(String, Duration)>,
}

impl AdmissionConfig {
    /// The queue bound [`new`](Self::new) starts with.
    ///
    /// See the [example](Self#examples).
    pub const DEFAULT_QUEUE_BOUND: usize = 1024;

    /// `limit` requests at once, up to [`DEFAULT_QUEUE_BOUND`](Self::DEFAULT_QUEUE_BOUND)
    /// waiting, earliest-deadline-first, every route costing nothing (a waiter is then
    /// dropped only when its budget is spent).
    ///
    /// See the [example](Self#examples).
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            queue_bound: Self::DEFAULT_QUEUE_BOUND,
            policy: QueuePolicy::EarliestDeadlineFirst,
            default_cost: Duration::ZERO,
            routes: Vec::new(),
        }
    }

    /// At most `bound` waiters; beyond it a newcomer is refused at once.
    ///
    /// See the [example](Self#examples).
    pub fn with_queue_bound(mut self, bound: usize) -> Self {
        self.queue_bound = bound;
        self
    }

    /// Serve waiters by `policy`.
    ///
    /// See the [example](Self#examples).
    pub fn with_policy(mut self, policy: QueuePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The cost of a route no rule names.
    ///
    /// See the [example](Self#examples).
    pub fn with_cost(mut self, cost: Duration) -> Self {
        self.default_cost = cost;
        self
    }

    /// The cost of `pattern`: an exact path, or a prefix ending in `*`. Rules added first
    /// win.
    ///
    /// See the [example](Self#examples).
    pub fn with_route(mut self, pattern: impl Into<String>, cost: Duration) -> Self {
        self.routes.push((pattern.into(), cost));
        self
    }

    /// Requests doing their work at once.
    ///
    /// See the [example](Self#examples).
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Waiters held at most.
    ///
    /// See the [example](Self#examples).
    pub fn queue_bound(&self) -> usize {
        self.queue_bound
    }

    /// The order waiters are served in.
    ///
    /// See the [example](Self#examples).
    pub fn policy(&self) -> QueuePolicy {
        self.policy
    }

    /// The budget a request to `route` must have left, beyond its wait, to be worth starting.
    ///
    /// See the [example](Self#examples).
    pub fn cost_for(&self, route: Option<&str>) -> Duration {
        let Some(route) = route else {
            return self.default_cost;
        };
        self.routes
            .iter()
            .find(|(pattern, _)| match pattern.strip_suffix('*') {
                Some(prefix) => route.starts_with(prefix),
                None => route == pattern,
            })
            .map_or(self.default_cost, |(_, cost)| *cost)
    }
}

/// What [`Admission`] needs to know about a request: its deadline and its route.
///
/// Implemented for `http::Request` (the budget from the extensions, else the ambient one; the
/// route from axum's `MatchedPath`, else the URI path). For other request types the defaults
/// read the ambient budget and use the default cost.
///
/// # Examples
///
/// Admission for jobs that are not HTTP requests: each job carries its own budget, and its
/// kind selects its cost.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), hopbudget::BudgetError> {
/// use std::time::Duration;
/// use hopbudget::admission::{AdmissionConfig, AdmissionLayer, AdmissionRequest};
/// use hopbudget::{BudgetError, Deadline, HopPolicy, RequestBudget};
/// use tower::{ServiceBuilder, ServiceExt};
///
/// struct Job {
///     kind: &'static str,
///     budget: RequestBudget,
/// }
///
/// impl AdmissionRequest for Job {
///     fn deadline(&self) -> Option<Deadline> {
///         Some(self.budget.deadline())
///     }
///
///     fn route(&self) -> Option<&str> {
///         Some(self.kind)
///     }
/// }
///
/// let config = AdmissionConfig::new(2).with_route("report", Duration::from_millis(200));
/// let workers = ServiceBuilder::new()
///     .layer(AdmissionLayer::with_errors(config))
///     .service_fn(|job: Job| async move { Ok::<_, BudgetError>(job.kind) });
/// let job = |kind, ms| Job {
///     kind,
///     budget: RequestBudget::local(Duration::from_millis(ms), HopPolicy::DEFAULT),
/// };
///
/// // 100 ms left cannot cover a 200 ms report: refused before it runs.
/// match workers.clone().oneshot(job("report", 100)).await {
///     Err(BudgetError::Refused(r)) => assert_eq!(r.required(), Duration::from_millis(200)),
///     other => panic!("{other:?}"),
/// }
/// // With a second left it runs.
/// assert_eq!(workers.oneshot(job("report", 1_000)).await?, "report");
/// # Ok(())
/// # }
/// ```
pub trait AdmissionRequest {
    /// The deadline the request waits under; `None`: no budget, FIFO without deadline logic.
    ///
    /// See the [example](AdmissionRequest#examples).
    fn deadline(&self) -> Option<Deadline> {
        RequestBudget::current().map(|b| b.deadline())
    }

    /// The route, to look up its cost.
    ///
    /// See the [example](AdmissionRequest#examples).
    fn route(&self) -> Option<&str> {
        None
    }
}
