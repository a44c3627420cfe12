//! Hedged calls inside the request's budget (rule [C23](crate::contract#c23); "The Tail at
//! Scale"; gRPC's hedging policy, A6).
//!
//! A call that has not answered after the hedge delay gets one more attempt, sent to the
//! same service, and the first answer wins. With [`HedgeBalance`] below, over the callee's
//! replicas, the hedge goes to a replica none of the call's earlier attempts went to (gRPC's
//! A6; a balancer that picks in `poll_ready`, as `tower::balance` does, cannot tell a hedge
//! from a first attempt, and may send it to the slow replica the first one waits on):
//!
//! - **Within the budget.** Every attempt runs in a child of the request's budget: the same
//!   deadline, so the client layer below ([`ClientBudgetLayer`](crate::http::client::ClientBudgetLayer),
//!   [`GrpcClientLayer`](crate::grpc::client::GrpcClientLayer)) stamps each one with the same
//!   shrinking remaining time, never a fresh one. A hedge is sent only when the forward budget
//!   still covers the expected latency after the delay, and the whole call, every attempt
//!   included, ends with the budget: no attempt outlives the deadline.
//! - **At most `max_attempts`**, the first one included, and a [`HedgeThrottle`] token bucket
//!   caps the extra load; a throttled hedge is not sent and not waited for.
//! - **Losers are cancelled, not failed.** When one attempt answers, the others' scopes are
//!   cancelled and their futures dropped: hyper resets their streams, a hopbudget server reads
//!   that as its caller going away ([C5](crate::contract#c5)) and records `cancelled`, and no
//!   layer here counts a loser as a failure or a refusal.
//! - **No extra load on a refusing callee.** With [`HedgeLayer::adaptive`] an
//!   [`AdaptiveThrottle`](crate::throttle::AdaptiveThrottle) (shared with the retry policy)
//!   counts every attempt's outcome and holds hedges back as the callee refuses more.
//! - **Idempotent requests only**, as the predicate given to the layer says
//!   ([`idempotent_method`] for HTTP methods; a match on the path for a route).
//!
//! The request must be `Clone`: put the hedge layer above the client layer, and for bodies
//! that cannot be cloned a buffering layer such as
//! [`ReplayLayer`](crate::grpc::client::ReplayLayer) below it, as for retries. Without an
//! ambient budget a call is not hedged: nothing says whether another attempt would fit.
//!
//! # Examples
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::time::Duration;
//! use hopbudget::hedge::{HedgeLayer, HedgeStats, idempotent_method};
//! use hopbudget::{HopPolicy, RequestBudget};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! let ms = Duration::from_millis;
//! // A callee whose first answer is slow (the tail) and the next one quick.
//! let calls = Arc::new(AtomicU32::new(0));
//! let callee = tower::service_fn(move |_req: http::Request<()>| {
//!     let n = calls.fetch_add(1, Ordering::SeqCst);
//!     async move {
//!         tokio::time::sleep(if n == 0 { ms(1_000) } else { ms(20) }).await;
//!         Ok::<_, tower::BoxError>(n)
//!     }
//! });
//! // Hedge GETs after 50 ms, at most 2 attempts, within the default throttle.
//! let layer = HedgeLayer::new(ms(50), 2, idempotent_method::<()>);
//! let client = ServiceBuilder::new().layer(layer.clone()).service(callee);
//!
//! let budget = RequestBudget::local(ms(500), HopPolicy::DEFAULT);
//! let answer = budget.scope(client.oneshot(http::Request::new(()))).await.unwrap();
//! assert_eq!(answer, 1, "the hedge answered at 70 ms; the first attempt was dropped");
//! assert_eq!(layer.stats(), HedgeStats { calls: 1, hedges: 1, throttled: 0, hedge_wins: 1 });
//! # }
//! ```
//!
//! Guide: *Reliability*, `docs/guide/reliability.md` in the repository (section *Hedging*).

mod balance;
mod layer;
mod race;
mod route;
mod settings;
#[cfg(test)]
mod tests;
mod throttle;

pub use balance::HedgeBalance;
pub use layer::{Hedge, HedgeLayer, HedgeStats, ResponseFuture};
pub use route::AttemptRoute;
pub use throttle::HedgeThrottle;

/// Whether an HTTP request's method is idempotent (RFC 9110: GET, HEAD, OPTIONS, TRACE, PUT,
/// DELETE), and so may be hedged. A gRPC call is always a POST: mark its idempotent methods by
/// path instead.
///
/// See the [module example](self#examples).
pub fn idempotent_method<B>(req: &http::Request<B>) -> bool {
    req.method().is_idempotent()
}
