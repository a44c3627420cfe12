//! The `hopbudget` command as a library, so integration tests can run the demo in process.
//!
//! - `hopbudget profile check FILE`: validate an adoption profile.
//! - `hopbudget demo`: the checkout call graph, per-hop timeouts vs propagated deadlines
//!   ([`demo`]).
//! - `hopbudget audit FILE…`: find chain breaks and other deadline trouble in OTLP JSON
//!   traces ([`audit`]).
//! - `hopbudget serve SERVICE --topology FILE`: one service of a demo topology alone
//!   ([`serve`]).
//! - `hopbudget soak`: a three-hop chain at a fixed rate, checked for leaks and lost requests
//!   ([`soak`]).

pub mod audit;
pub mod cli;
pub mod demo;
pub mod profile_cmd;
pub mod serve;
pub mod soak;

/// The generated gRPC code for `proto/demo.proto`.
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub mod proto {
    tonic::include_proto!("hopbudget.demo");
}
