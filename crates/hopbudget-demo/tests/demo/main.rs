//! `hopbudget-demo demo` in process and as a command: the three modes on one schedule, the
//! sweep, a forgetful hop, a budget too small, a gRPC edge, admission at a leaf, hedging, the
//! retry wave, the e-mail over NATS, and the operator's `hopbudget audit` on its traces. One
//! test binary, a module per behaviour; the runs go one at a time
//! (`support::serial::one_demo_at_a_time`), as each measures this machine under load.

#[path = "../support/mod.rs"]
mod support;

mod admission;
mod audit;
mod broker;
mod cli;
mod forgetful;
mod grpc_root;
mod hedge;
mod over_shrunk;
mod retry_wave;
mod sweep;
mod three_modes;
