//! gRPC hops over real sockets: tonic servers behind `GrpcServerLayer` and clients through
//! `GrpcClientLayer`, chains, refusal, expiry, cancellation, streams, `grpc-timeout` as other
//! implementations write it, protocol shims to and from HTTP, and interop with grpc-go,
//! grpcio and grpc-js (their peers are in the workspace's `interop/`).
//!
//! One test binary of the integration tests, grouped by area as tonic and axum group theirs
//! (`cargo test -p hopbudget --all-features --test grpc`); shared helpers are in
//! `tests/support`.

#[cfg(feature = "grpc")]
#[path = "../support/go.rs"]
mod go_support;
#[cfg(feature = "grpc")]
#[path = "../support/grpc/mod.rs"]
mod grpc_support;
#[cfg(feature = "grpc")]
#[path = "../support/hedge.rs"]
mod hedge_support;

mod cancel;
mod chain;
mod client_calls;
mod expiry;
mod hedge;
mod peer_grpcgo;
mod peer_grpcio;
mod peer_grpcjs;
mod refuse;
mod shims;
mod stream;
mod timeout_wire;
