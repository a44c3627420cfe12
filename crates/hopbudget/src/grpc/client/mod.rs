//! Client side of a gRPC hop: a tower layer for tonic's `Channel` (or any tower gRPC client)
//! that forwards the current budget on every call.
//!
//! For each call [`GrpcClientLayer`] takes the budget from the request's extensions (a
//! [`RequestBudget`](crate::RequestBudget) put on the `tonic::Request`), else the ambient one
//! ([`RequestBudget::current`](crate::RequestBudget::current)), else a fallback of the
//! profile's edge total (C8). Then:
//!
//! - **Refuse locally** when the forward budget is below the profile's threshold (C3): nothing
//!   is sent, no connection is opened, and the caller gets DEADLINE_EXCEEDED marked
//!   `x-deadline-outcome: refused` with the required and remaining milliseconds.
//! - **Narrow to the call's own timeout** (C16): a `grpc-timeout` already on the request
//!   (tonic's `Request::set_timeout` puts it there, or the application set it by hand) makes
//!   the call run under a child budget
//!   ([`RequestBudget::child_until`](crate::RequestBudget::child_until)) ending at the tighter
//!   of the two deadlines. It never extends the budget and is never dropped.
//! - **Stamp** `grpc-timeout` with the forward budget (remaining minus hop margin minus transit
//!   allowance, rounded down, C2) on every call, so nobody can forget it; but only on a
//!   trusted channel (C19, S16): a layer made [`untrusted`](GrpcClientLayer::untrusted), or a
//!   request whose URI names a host outside the profile's `outbound.trusted_hosts`, sends no
//!   `grpc-timeout` and no `x-deadline-*` metadata, and is still bounded locally.
//! - **Bound the wait** at the call's deadline minus the hop margin, and stop waiting as soon
//!   as the parent budget ends (expired or cancelled). Stopping drops the call, which resets
//!   the HTTP/2 stream so the downstream cancels its own work (C5, C7). The response *body*
//!   (a server stream, or a unary reply that trickles) is bounded by the same end: it is cut
//!   off with DEADLINE_EXCEEDED trailers marked `expired`, or CANCELLED when the request was
//!   cancelled ([`ResponseBody`]).
//! - **Fall back** to the profile's edge total outside any request, counted and logged by the
//!   same code as the HTTP client's (C8).
//! - **Classify**: a CANCELLED that arrives after the call's deadline, and tonic's own client
//!   timer (which it reports as CANCELLED), become DEADLINE_EXCEEDED, as grpc-java and
//!   grpc-dotnet report them (C4).
//! - **Never retry**: the layer makes exactly one attempt. Put any retry layer *outside* it
//!   with [`DeadlineRetry`](crate::retry::DeadlineRetry), which obeys C6.
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
//! let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:50051").connect_lazy();
//! let service = ServiceBuilder::new()
//!     .layer(GrpcClientLayer::new(Profile::default()))
//!     .service(channel);
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
//! // A channel to a third party: no `grpc-timeout` leaves, the wait is still bounded (C19).
//! // `trust_all()` is the opposite: the header goes to every host of the channel.
//! let external = ServiceBuilder::new()
//!     .layer(GrpcClientLayer::new(Profile::default()).untrusted())
//!     .service(service_fn(|req: http::Request<()>| async move {
//!         let sent = req.headers().contains_key("grpc-timeout").to_string();
//!         Ok::<_, Infallible>(http::Response::builder().header("seen", sent).body(()).unwrap())
//!     }));
//! let call = http::Request::builder().uri("https://api.example.com/geo.Geo/Lookup").body(()).unwrap();
//! let response = budget.scope(external.oneshot(call)).await.unwrap();
//! assert_eq!(response.headers()["seen"], "false");
//! let all = GrpcClientLayer::new(Profile::default()).trust_all();
//! assert_eq!(all.profile().service(), Profile::default().service());
//! # }
//! ```

mod body;
mod future;
mod layer;
mod service;

pub use body::ResponseBody;
pub use future::ResponseFuture;
pub use layer::GrpcClientLayer;
pub use service::GrpcClient;

#[cfg(test)]
mod tests;
