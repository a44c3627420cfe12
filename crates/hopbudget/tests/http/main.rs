//! HTTP hops over real sockets: the server layer and the client layers (reqwest middleware,
//! tower client layer) on axum and hyper, chains of hops, answers made before the body was
//! read, admission, retries, a reverse proxy between hops, and profiles replaced while the
//! servers run.
//!
//! One test binary of the integration tests, grouped by area as tonic and axum group theirs
//! (`cargo test -p hopbudget --all-features --test http`); shared helpers are in
//! `tests/support`, the peers in other languages in the workspace's `interop/`. The tests
//! that capture spans install their subscriber for their own thread only
//! (`tracing::subscriber::set_default`), so they share this binary.

#[cfg(feature = "axum")]
#[path = "../support/go.rs"]
mod go_support;
#[cfg(all(feature = "axum", feature = "reqwest", feature = "grpc"))]
#[path = "../support/grpc/mod.rs"]
mod grpc_support;
#[cfg(feature = "axum")]
#[path = "../support/hedge.rs"]
mod hedge_support;
#[cfg(feature = "axum")]
#[path = "../support/http.rs"]
mod http_support;

mod admission;
mod answers;
mod chain;
mod client_calls;
mod early_answer;
mod early_answer_clients;
mod edges;
mod hedge;
mod profile_reload;
mod proxy_nginx;
mod retry;
mod skip_below_threshold;
