//! The client side of an HTTP hop: the budget leaves the process on every outbound call.
//!
//! [`ClientBudgetLayer`] wraps any tower HTTP client (hyper-util's legacy `Client`, a
//! `tower::ServiceBuilder` stack, another middleware). For each call it:
//!
//! 1. takes the budget from the request extensions, else the task-local scope
//!    ([`RequestBudget::current`](crate::RequestBudget::current)), else a fresh budget of the
//!    profile's edge total, counted and logged ([C8](crate::contract#c8)): a call is never unbounded;
//! 2. narrows it to a timeout the application set on this call, a [`CallTimeout`] in the
//!    request's extensions or a value set by hand in the carrier header
//!    (`x-request-timeout-ms: 150`), as a child budget
//!    ([`RequestBudget::child_until`](crate::RequestBudget::child_until)): the tighter of the
//!    two wins, a longer per-call value never extends the budget ([C16](crate::contract#c16));
//! 3. computes the forward budget, `remaining - hop_margin - transit_allowance` ([C2](crate::contract#c2)), and
//!    fails with [`BudgetError::Refused`](crate::BudgetError::Refused) below the refuse
//!    threshold without calling the inner client, so no connection is opened ([C3](crate::contract#c3));
//! 4. stamps the profile's outbound carrier (or the one chosen with
//!    [`stamp_in`](ClientBudgetLayer::stamp_in)): relative milliseconds by default
//!    (`x-request-timeout-ms`), absolute epoch milliseconds (`x-request-deadline`) when the
//!    profile says clocks are trusted; but only for a trusted destination ([C19](crate::contract#c19), [S16](crate::contract#s16)): for a
//!    host outside the profile's `outbound.trusted_hosts`, or from a layer made
//!    [`untrusted`](ClientBudgetLayer::untrusted), every deadline header (`x-request-timeout-ms`,
//!    `x-request-deadline`, `grpc-timeout`, `x-deadline-*`) is removed instead;
//! 5. bounds the wait by the forward budget plus the transit allowance for the reply, that is
//!    until `deadline - hop_margin`, so that the margin stays with this hop ([S4](crate::contract#s4)); and aborts
//!    (drops) the call when the parent budget is cancelled or expires ([C5](crate::contract#c5), [C7](crate::contract#c7)). The response
//!    *body* is bounded by the same end ([`ResponseBody`]): a server that sends its headers in
//!    time and then trickles the body fails the body read with `Expired` at the deadline
//!    (`Cancelled` when the parent was cancelled), so it cannot hold the caller past its budget;
//! 6. classifies the reply with [`classify`]: a downstream `expired` answer (504) fails the
//!    call with [`BudgetError::Expired`](crate::BudgetError::Expired), a deadline refusal
//!    with `Refused` (required and remaining ms taken from its headers), a `cancelled` answer
//!    with `Cancelled` ([C4](crate::contract#c4)). Any other response, errors like 500 included, is returned as is,
//!    and so is a bare 504 (no `x-deadline-outcome` marker) that arrives while the caller
//!    could still forward a call: that is a proxy's own timeout, not this request's deadline;
//! 7. never retries ([C6](crate::contract#c6)); pair it with [`retry`](crate::retry) for that.
//!
//! Errors are boxed (`tower::BoxError`); find the deadline outcome in them with
//! [`BudgetError::find`](crate::BudgetError::find).
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use std::convert::Infallible;
//! use std::time::Duration;
//! use http::{Request, Response};
//! use hopbudget::http::client::ClientBudgetLayer;
//! use hopbudget::{BudgetError, Profile, RequestBudget};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! let profile = Profile::default();
//! // Stands in for hyper-util's `Client`: echoes the deadline header it was sent.
//! let client = ServiceBuilder::new()
//!     .layer(ClientBudgetLayer::new(profile.clone()))
//!     .service_fn(|req: Request<()>| async move {
//!         let sent = req.headers()["x-request-timeout-ms"].to_str().unwrap().to_owned();
//!         Ok::<_, Infallible>(Response::new(sent))
//!     });
//!
//! let budget = RequestBudget::local(Duration::from_millis(300), profile.policy());
//! let res = budget
//!     .scope(client.clone().oneshot(Request::new(())))
//!     .await
//!     .unwrap();
//! // 300 ms minus 5 ms margin minus 1 ms transit, rounded down (C2).
//! assert!(res.into_body().into_inner().parse::<u64>().unwrap() <= 294);
//!
//! // 12 ms left: the forward budget is below the 10 ms threshold, refused locally (C3).
//! let short = RequestBudget::local(Duration::from_millis(12), profile.policy());
//! let err = short.scope(client.oneshot(Request::new(()))).await.unwrap_err();
//! assert!(matches!(BudgetError::find(&*err), Some(BudgetError::Refused(_))));
//!
//! // A third-party API: no deadline header leaves this client, though the wait is still
//! // bounded by the budget (C19, S16). `trust_all()` is the opposite: headers to every host.
//! let external = ServiceBuilder::new()
//!     .layer(ClientBudgetLayer::new(profile.clone()).untrusted())
//!     .service_fn(|req: Request<()>| async move {
//!         let sent = req.headers().contains_key("x-request-timeout-ms");
//!         Ok::<_, Infallible>(Response::new(sent.to_string()))
//!     });
//! let call = Request::get("https://api.example.com/v1/rates").body(()).unwrap();
//! let res = budget.scope(external.oneshot(call)).await.unwrap();
//! assert_eq!(res.into_body().into_inner(), "false");
//! let internal_only = ClientBudgetLayer::new(profile.clone()).trust_all();
//! assert_eq!(internal_only.profile().service(), profile.service());
//! # }
//! ```

mod body;
mod future;
mod layer;
mod service;

pub use crate::hop::outbound::classify;
pub use body::ResponseBody;
pub use future::ResponseFuture;
pub use layer::ClientBudgetLayer;
pub use service::ClientBudget;

/// A timeout for one call, put in the request's extensions: the call runs under the tighter of
/// it and the request's budget, never the looser ([C16](crate::contract#c16)), as a timeout
/// set by hand in the carrier header does, without spelling it in a header first. A sidecar
/// hands the deadline a service put on its own call this way.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::convert::Infallible;
/// use std::time::Duration;
/// use http::{Request, Response};
/// use hopbudget::http::client::{CallTimeout, ClientBudgetLayer};
/// use hopbudget::{Profile, RequestBudget};
/// use tower::{ServiceBuilder, ServiceExt};
///
/// let profile = Profile::default();
/// let client = ServiceBuilder::new()
///     .layer(ClientBudgetLayer::new(profile.clone()))
///     .service_fn(|req: Request<()>| async move {
///         let sent = req.headers()["x-request-timeout-ms"].to_str().unwrap().to_owned();
///         Ok::<_, Infallible>(Response::new(sent))
///     });
/// let budget = RequestBudget::local(Duration::from_secs(2), profile.policy());
/// let mut call = Request::new(());
/// call.extensions_mut().insert(CallTimeout(Duration::from_millis(100)));
/// let res = budget.scope(client.oneshot(call)).await.unwrap();
/// assert!(res.into_body().into_inner().parse::<u64>().unwrap() <= 94, "the call's 100 ms, less the margin");
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallTimeout(pub std::time::Duration);
