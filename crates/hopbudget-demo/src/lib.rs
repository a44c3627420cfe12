//! hopbudget's demo harness as a library, so integration tests can run the demo in process.
//! Not published: it is run from a checkout (`cargo run --release -- demo` at the workspace
//! root); the command an operator installs is `hopbudget` (crate `hopbudget-cli`).
//!
//! - `hopbudget-demo demo`: the checkout call graph, per-hop timeouts vs propagated deadlines
//!   ([`demo`]).
//! - `hopbudget-demo serve SERVICE --topology FILE`: one service of a demo topology alone
//!   ([`serve`]).
//! - `hopbudget-demo soak`: a three-hop chain at a fixed rate, checked for leaks and lost
//!   requests ([`soak`]).
//!
//! The hop log line ([`hop_log`]) is below both the demo and `serve`: each service writes it,
//! in process or alone.

pub mod cli;
pub mod demo;
pub mod hop_log;
pub mod serve;
pub mod soak;

/// The generated gRPC code for `proto/demo.proto`.
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub mod proto {
    tonic::include_proto!("hopbudget.demo");
}
