//! Client-side adaptive throttling (Google SRE, *Handling Overload*): a client whose callee
//! refuses much of its traffic rejects calls locally instead of sending a wave of them (rule
//! [C23](crate::contract#c23), scenario [S22](crate::contract#s22)).
//!
//! Over a sliding window (two minutes by default) an [`AdaptiveThrottle`] counts the attempts
//! the client made (`requests`) and those the callee accepted (`accepts`), and rejects an
//! attempt locally with probability `max(0, (requests - K * accepts) / (requests + 1))`,
//! `K = 2`. While the callee accepts at least half the attempts nothing is rejected; at 3x
//! overload (a third accepted) a third of the attempts are dropped here and, as the refusals
//! pile up, more, so the attempts sent stay near what the callee accepts. A locally rejected
//! attempt counts as a request, as in the SRE book, so the rejection rate keeps up with the
//! load.
//!
//! The draw is deterministic (error diffusion: the probabilities are summed and every time the
//! sum passes one an attempt is rejected), so the rejected share is exact at any rate and tests
//! need no seed.
//!
//! Where it applies, one `Arc` per callee:
//!
//! - **Every call**, as the SRE book does it: [`ThrottleLayer`], below the retry and hedge
//!   layers and above the client layer, so that every attempt (the user's own first ones
//!   included) is counted and may be rejected with [`Throttled`]. This is what keeps the calls
//!   sent near what the callee accepts when the user's own calls alone are 3x its capacity.
//! - **Only the extra attempts**: [`DeadlineRetry::with_throttle`](crate::retry::DeadlineRetry::with_throttle)
//!   and [`HedgeLayer::adaptive`](crate::hedge::HedgeLayer::adaptive) count every attempt
//!   but reject only retries and hedges; the user's first attempts always go out. Use these
//!   instead of the layer, not with it: both would count every attempt twice.
//!
//! See the examples on [`AdaptiveThrottle`] and [`ThrottleLayer`].

mod adaptive;
mod future;
mod layer;
mod service;
#[cfg(test)]
mod tests;

/// The error a call this throttle rejected returns: defined with the crate's other errors,
/// below the result classification that reads it.
pub use crate::error::Throttled;
pub use adaptive::AdaptiveThrottle;
pub use future::ThrottleFuture;
pub use layer::ThrottleLayer;
pub use service::Throttle;
