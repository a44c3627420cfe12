//! `hopbudget check` against services in this process on loopback, HTTP and gRPC: on the
//! library's layers, forgetful, home-made. One test binary, a module per protocol; the checks
//! run one at a time (`support::serial::CHECK`). The interop services' checks are in the
//! `fleet` binary.

#[path = "../support/mod.rs"]
mod support;

mod grpc_services;
mod http_services;
