//! Server side of a gRPC hop: a tower layer for tonic servers that gives every call its
//! [`RequestBudget`](crate::RequestBudget).
//!
//! On each call [`GrpcServerLayer`] reads `grpc-timeout` and the other carriers the profile
//! enables (the tightest wins, clamped to the profile maximum), or falls back to the profile's
//! edge total when none arrived (rule [C8](crate::contract#c8)). Then:
//!
//! - **Malformed** deadline header: INVALID_ARGUMENT (the profile's `status.grpc.malformed`),
//!   whose message names the header and the reason ([C9](crate::contract#c9)). Counted; the handler never runs.
//! - **Too little budget** for the route (`profile.min_budget("/pkg.Service/Method")`):
//!   DEADLINE_EXCEEDED before the handler runs, with metadata `x-deadline-outcome: refused`,
//!   `x-deadline-required-ms` and `x-deadline-remaining-ms` ([C3](crate::contract#c3), [S2](crate::contract#s2)). A zero budget (`0m`) is
//!   already expired: DEADLINE_EXCEEDED marked `expired`.
//! - Otherwise the budget goes into the request extensions (a tonic handler reads it with
//!   `request.extensions().get::<RequestBudget>()`) and the task-local scope
//!   ([`RequestBudget::current`](crate::RequestBudget::current)), so the handler's own calls
//!   through [`GrpcClientLayer`](crate::grpc::client::GrpcClientLayer) or the HTTP client
//!   layers forward it without further code ([C11](crate::contract#c11)).
//! - **Expiry**: when the deadline passes with the handler still running, the budget is marked
//!   expired (its spawned children stop, [C7](crate::contract#c7)), the handler is dropped and the caller gets
//!   DEADLINE_EXCEEDED, never CANCELLED ([C4](crate::contract#c4)), at the deadline itself. tonic's transport
//!   wraps every server in its own `grpc-timeout` timer, outside all user layers, which
//!   answers CANCELLED ("Timeout expired"). It arms that timer only *after* this layer's
//!   `call` has returned, and it polls the layer before its timer; the layer fixes the
//!   deadline inside `call`, so its timer is never the later one and wins every race
//!   without a head start (`tests/grpc/expiry.rs` checks 30 calls in a row; arming ours
//!   2 ms late makes tonic's CANCELLED win at once).
//! - **Client reset** (RST_STREAM, a dropped connection): hyper drops the call, and the layer
//!   cancels the request's tree so nothing the handler started keeps running ([C5](crate::contract#c5)). The hop's
//!   outcome is the budget's end cause: `cancelled` while budget remained, `expired` if the
//!   deadline had already passed ([C4](crate::contract#c4)).
//!
//! Each call is one [`Hop`](crate::observe::Hop) with its terminal status ([C14](crate::contract#c14)). Its route
//! label is the gRPC method path once the service has answered that method as one it has (a
//! message, or any status but UNIMPLEMENTED, which tonic's router answers for a method no
//! service implements); until then `other`, so that no caller can mint labels ([C20](crate::contract#c20)). The
//! first answered call of a method is counted under its own label, arrival included. Give the
//! layer the server's descriptor set ([`GrpcServerLayer::with_methods`], [`DeclaredMethods`])
//! and each of its methods is labelled from its first call, whatever its outcome. A
//! unary answer is complete once its trailers are handed over. A status the handler returns itself is read back: a
//! DEADLINE_EXCEEDED from below makes this hop `expired` too ([C4](crate::contract#c4)).
//!
//! Leave tonic's own `Server::timeout` unset: it fires outside this layer and answers
//! CANCELLED. The profile's `max_ms` caps inbound budgets instead.
//!
//! **Streams ([C13](crate::contract#c13)).** The deadline bounds the handler and then the response body: a
//! server-streaming body still running at the deadline is ended with DEADLINE_EXCEEDED
//! trailers and the handler's stream is dropped (tonic's own timer covers only the time to
//! the headers). On a route the profile marks `mode: stream` the deadline covers the time to
//! the first message only; after it the body runs for the profile's `stream_lifetime_ms`.
//!
//! # Example
//!
//! ```no_run
//! use hopbudget::grpc::server::GrpcServerLayer;
//! use hopbudget::Profile;
//!
//! # async fn run(routes: tonic::service::Routes) -> Result<(), Box<dyn std::error::Error>> {
//! let profile = Profile::load("profiles/default.yaml")?;
//! tonic::transport::Server::builder()
//!     .layer(GrpcServerLayer::new(profile))
//!     .add_routes(routes)
//!     .serve("127.0.0.1:50051".parse()?)
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! The same layer in process, refusing a call the route cannot finish ([S2](crate::contract#s2)):
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use std::convert::Infallible;
//! use hopbudget::grpc::server::GrpcServerLayer;
//! use hopbudget::{Profile, RequestBudget};
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//!
//! let profile = Profile::from_yaml(
//!     "routes:\n  - path: /tax.Tax/Quote\n    min_budget_ms: 200\n",
//!     "inline.yaml",
//! )
//! .unwrap();
//! let tax = ServiceBuilder::new()
//!     .layer(GrpcServerLayer::new(profile))
//!     .service(service_fn(|req: http::Request<()>| async move {
//!         let budget = req.extensions().get::<RequestBudget>().unwrap();
//!         Ok::<_, Infallible>(http::Response::new(budget.remaining().as_millis().to_string()))
//!     }));
//! let call = http::Request::builder()
//!     .uri("/tax.Tax/Quote")
//!     .header("grpc-timeout", "120m")
//!     .body(())
//!     .unwrap();
//! let response = tax.oneshot(call).await.unwrap();
//! // Trailers-only DEADLINE_EXCEEDED, marked refused; the handler never ran.
//! assert_eq!(response.headers()["grpc-status"], "4");
//! assert_eq!(response.headers()["x-deadline-outcome"], "refused");
//! assert_eq!(response.headers()["x-deadline-required-ms"], "200");
//! # }
//! ```
//!
//! A handler reads the budget in one call with [`BudgetExt::budget`] (from the extensions, or
//! ambiently), or `INTERNAL` when the layer is missing:
//!
//! ```
//! use hopbudget::grpc::server::BudgetExt;
//!
//! fn remaining_ms<T>(request: &tonic::Request<T>) -> Result<u128, tonic::Status> {
//!     Ok(request.budget()?.remaining().as_millis())
//! }
//! # assert_eq!(remaining_ms(&tonic::Request::new(())).unwrap_err().code(), tonic::Code::Internal);
//! ```

mod body;
mod declared;
mod extract;
mod future;
mod layer;
mod method;
mod service;

// The admission layer's gRPC answer is defined with admission (`admission/grpc.rs`) and named
// only here, beside the server layer it answers like: one public path per item.
pub use crate::admission::grpc::GrpcAnswer;
pub use body::ResponseBody;
pub use declared::{DeclaredMethods, DescriptorSetError};
pub use extract::BudgetExt;
pub use future::ResponseFuture;
pub use layer::GrpcServerLayer;
pub use service::GrpcServer;
