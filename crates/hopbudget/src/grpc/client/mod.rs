//! Client side of a gRPC hop: a tower layer for tonic's `Channel` (or any tower gRPC client)
//! that forwards the current budget on every call.
//!
//! For each call [`GrpcClientLayer`] takes the budget from the request's extensions (a
//! [`RequestBudget`](crate::RequestBudget) put on the `tonic::Request`), else the ambient one
//! ([`RequestBudget::current`](crate::RequestBudget::current)), else a fallback of the
//! profile's edge total ([C8](crate::contract#c8)). Then:
//!
//! - **Refuse locally** when the forward budget is below the profile's threshold ([C3](crate::contract#c3)): nothing
//!   is sent, no connection is opened, and the caller gets DEADLINE_EXCEEDED marked
//!   `x-deadline-outcome: refused` with the required and remaining milliseconds.
//! - **Narrow to the call's own timeout** ([C16](crate::contract#c16)): a `grpc-timeout` already on the request
//!   (tonic's `Request::set_timeout` puts it there, or the application set it by hand) makes
//!   the call run under a child budget
//!   ([`RequestBudget::child_until`](crate::RequestBudget::child_until)) ending at the tighter
//!   of the two deadlines. It never extends the budget and is never dropped.
//! - **Stamp** `grpc-timeout` with the forward budget (remaining minus hop margin minus transit
//!   allowance, rounded down, [C2](crate::contract#c2)) on every call, so nobody can forget it; but only to a
//!   trusted destination ([C19](crate::contract#c19), [S16](crate::contract#s16)). A tonic-generated client's request carries only the
//!   method path (`/pkg.Svc/Method`): the channel adds its endpoint's authority *below* this
//!   layer, so the layer cannot read the destination from the request. Name it when the layer
//!   is built, with [`destination`](GrpcClientLayer::destination)`(endpoint.uri())`, and the
//!   profile's `outbound.trusted_hosts` decides for every call of the channel. A layer made
//!   [`untrusted`](GrpcClientLayer::untrusted), a named destination outside the trusted
//!   hosts, or a host in the request URI or a `host` entry outside them, sends no
//!   `grpc-timeout` and no `x-deadline-*` metadata, and is still bounded locally. A call
//!   whose destination is named nowhere follows `outbound.unknown_destination`: `trusted`
//!   by default, as gRPC itself sends `grpc-timeout` to every peer and [C11](crate::contract#c11) keeps the deadline
//!   unless told otherwise ([`UnknownDestination`](crate::profile::UnknownDestination)).
//! - **Bound the wait** at the call's deadline minus the hop margin, and stop waiting as soon
//!   as the parent budget ends (expired or cancelled). Stopping drops the call, which resets
//!   the HTTP/2 stream so the downstream cancels its own work ([C5](crate::contract#c5), [C7](crate::contract#c7)). The response *body*
//!   (a server stream, or a unary reply that trickles) is bounded by the same end: it is cut
//!   off with DEADLINE_EXCEEDED trailers marked `expired`, or CANCELLED when the request was
//!   cancelled ([`ResponseBody`]).
//! - **Fall back** to the profile's edge total outside any request, counted and logged by the
//!   same code as the HTTP client's ([C8](crate::contract#c8)).
//! - **Classify** every answer as the HTTP clients do (one reading, [C4](crate::contract#c4), [C10](crate::contract#c10)): the
//!   `x-deadline-outcome` marker first, whatever code the callee's profile spells it with,
//!   then the gRPC codes. A `cancelled` answer that arrives once the callee's deadline has
//!   passed, and tonic's own client timer (which it reports as CANCELLED), become the
//!   profile's expiry code marked `expired`, as grpc-java and grpc-dotnet report them ([C4](crate::contract#c4)).
//! - **Never retry**: the layer makes exactly one attempt. Put any retry layer *outside* it
//!   with [`DeadlineRetry`](crate::retry::DeadlineRetry), which obeys [C6](crate::contract#c6), classified by
//!   [`GrpcReplies`]: a gRPC refusal arrives as a successful HTTP
//!   response (`grpc-status` in its headers), which `BudgetErrors` never sees. A tonic body
//!   cannot be cloned for a second attempt: [`ReplayLayer`] above the retry keeps it. The
//!   whole stack is on [`GrpcReplies`].
//!
//! Errors of the inner service pass through boxed; the layer's own outcomes are trailers-only
//! gRPC responses, so a tonic client sees them as an ordinary `tonic::Status`
//! (see [`outcome`](crate::grpc::outcome) and [`refusal`](crate::grpc::refusal)).
//!
//! # Example
//!
//! ```no_run
//! use hopbudget::grpc::client::GrpcClientLayer;
//! use hopbudget::Profile;
//! use tower::ServiceBuilder;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let endpoint = tonic::transport::Endpoint::from_static("http://tax.internal:50051");
//! let service = ServiceBuilder::new()
//!     // The channel's destination, so `outbound.trusted_hosts` can judge it (C19).
//!     .layer(GrpcClientLayer::new(Profile::default()).destination(endpoint.uri()))
//!     .service(endpoint.connect_lazy());
//! // let mut tax = TaxClient::new(service); // any tonic-generated client
//! # let _ = service; Ok(()) }
//! ```
//!
//! In process, with a stand-in for the channel that shows what goes on the wire:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use std::convert::Infallible;
//! use std::time::Duration;
//! use hopbudget::grpc::client::GrpcClientLayer;
//! use hopbudget::{Profile, RequestBudget};
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//!
//! let wire = service_fn(|req: http::Request<()>| async move {
//!     let sent = req.headers()["grpc-timeout"].clone();
//!     Ok::<_, Infallible>(http::Response::builder().header("seen", sent).body(()).unwrap())
//! });
//! let client = ServiceBuilder::new()
//!     .layer(GrpcClientLayer::new(Profile::default()))
//!     .service(wire);
//!
//! // 500 ms left: 494 ms forwarded (5 ms margin, 1 ms transit).
//! let budget = RequestBudget::local(Duration::from_millis(500), Profile::default().policy());
//! let call = http::Request::builder().uri("/tax.Tax/Quote").body(()).unwrap();
//! let response = budget.scope(client.clone().oneshot(call)).await.unwrap();
//! assert_eq!(response.headers()["seen"], "494000u");
//!
//! // 12 ms left: 6 ms would be forwarded, below the 10 ms threshold: refused locally.
//! let short = RequestBudget::local(Duration::from_millis(12), Profile::default().policy());
//! let call = http::Request::builder().uri("/tax.Tax/Quote").body(()).unwrap();
//! let response = short.scope(client.oneshot(call)).await.unwrap();
//! assert_eq!(response.headers()["grpc-status"], "4");
//! assert_eq!(response.headers()["x-deadline-outcome"], "refused");
//!
//! // A channel to a third party. Its requests carry only the method path, as a tonic client
//! // sends them; the destination named when the layer was built is outside the profile's
//! // trusted hosts, so no `grpc-timeout` leaves, and the wait is still bounded (C19, S16).
//! // `untrusted()` says the same without naming the host; `trust_all()` is the opposite.
//! let payments: http::Uri = "https://api.payments.example".parse().unwrap();
//! let external = ServiceBuilder::new()
//!     .layer(GrpcClientLayer::new(Profile::default()).destination(&payments))
//!     .service(service_fn(|req: http::Request<()>| async move {
//!         let sent = req.headers().contains_key("grpc-timeout").to_string();
//!         Ok::<_, Infallible>(http::Response::builder().header("seen", sent).body(()).unwrap())
//!     }));
//! let call = http::Request::builder().uri("/pay.Payments/Charge").body(()).unwrap();
//! let response = budget.scope(external.oneshot(call)).await.unwrap();
//! assert_eq!(response.headers()["seen"], "false");
//! let all = GrpcClientLayer::new(Profile::default()).trust_all();
//! assert_eq!(all.profile().service(), Profile::default().service());
//! # }
//! ```

mod body;
mod future;
mod layer;
mod replay;
mod replies;
mod service;
mod watch;

pub use body::ResponseBody;
pub use future::ResponseFuture;
pub use layer::GrpcClientLayer;
pub use replay::{Replay, ReplayBody, ReplayLayer, into_tonic};
pub use replies::GrpcReplies;
pub use service::GrpcClient;

#[cfg(test)]
mod tests;
