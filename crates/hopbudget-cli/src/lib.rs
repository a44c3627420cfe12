//! The `hopbudget` command, what an operator runs, as a library so integration tests can
//! call it in process.
//!
//! - `hopbudget profile check FILE`: validate an adoption profile ([`profile_cmd`]).
//! - `hopbudget audit FILE…`: find chain breaks and other deadline trouble in OTLP JSON
//!   traces ([`audit`]).
//!
//! The demo harness (`demo`, `serve`, `soak`) is the workspace's unpublished `hopbudget-demo`
//! crate: `cargo run --release -- demo` from a checkout.

pub mod audit;
pub mod cli;
pub mod profile_cmd;
