//! The `hopbudget` command, what an operator runs, as a library so integration tests can
//! call it in process.
//!
//! - `hopbudget profile check FILE`: validate an adoption profile ([`profile_cmd`]).
//! - `hopbudget audit FILE…`: find chain breaks and other deadline trouble in OTLP JSON
//!   traces ([`audit`]).
//! - `hopbudget proxy --listen ADDR --upstream ADDR --profile FILE`: a sidecar that keeps the
//!   deadline contract for a service in any language ([`proxy`]).
//! - `hopbudget check --target URL --downstream ADDR`: a black-box check of any service's
//!   deadline behaviour, as a scorecard ([`check`]).
//!
//! The demo harness (`demo`, `serve`, `soak`) is the workspace's unpublished `hopbudget-demo`
//! crate: `cargo run --release -- demo` from a checkout.

pub mod audit;
pub mod check;
pub mod cli;
pub mod profile_cmd;
pub mod proxy;
