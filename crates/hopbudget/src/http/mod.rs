//! HTTP hops: tower layers that carry the request budget into and out of a service.
//!
//! - [`server`]: [`ServerBudgetLayer`](server::ServerBudgetLayer) reads the inbound deadline
//!   headers, refuses work that cannot finish, bounds the handler by the deadline, and
//!   cancels the request's tree when the deadline passes or the client goes away (C1-C9,
//!   [C13](crate::contract#c13)). Works with `axum::Router::layer` and any hyper/tower HTTP service.
//! - [`client`]: [`ClientBudgetLayer`](client::ClientBudgetLayer) stamps the forward budget on
//!   outbound requests, refuses calls that cannot finish, bounds the wait and aborts when the
//!   parent ends (C2-C8). Works with hyper-util's legacy `Client` and any tower HTTP client.
//! - `reqwest` (feature `reqwest`): the same client behaviour as a reqwest-middleware
//!   `Middleware`.
//! - With the feature `axum`, [`RequestBudget`](crate::RequestBudget) is an axum extractor,
//!   and [`BudgetError`](crate::BudgetError) an axum response ([`budget_response`] spells it
//!   for any status map).
//!
//! Responses a layer produces itself (refusal, expiry, malformed header) carry the header
//! [`x-deadline-outcome`](crate::status::OUTCOME_METADATA) naming the outcome, so that a
//! caller can tell them apart even when a profile maps two outcomes to one status code.
//!
//! See the examples on [`ServerBudgetLayer`](server#example) and [`ClientBudgetLayer`](client#example).
//!
//! Guide: *HTTP hops*, `docs/guide/http.md` in the repository.

pub mod client;
pub mod server;

// Defined with the rest of the HTTP answer's spelling, which the core's admission layer
// shares (`answer/http.rs`, outside this feature).
pub use crate::answer::http::budget_response;

#[cfg(feature = "reqwest")]
pub mod reqwest;

#[cfg(feature = "axum")]
mod extract;
#[cfg(feature = "axum")]
pub use extract::MissingBudget;
