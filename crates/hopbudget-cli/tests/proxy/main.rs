//! `hopbudget proxy` as a real process in front of services in this process (axum, hyper,
//! tonic) on loopback: its command line, the budget it restates, its connections, egress,
//! gRPC labels, log format and spans. One test binary, a module per behaviour; each test
//! starts its own service and proxy, so the counts it reads are its own.

#[path = "../support/mod.rs"]
mod support;

mod cli;
mod connections;
mod egress;
mod front;
mod grpc_labels;
mod log_format;
mod spans;
