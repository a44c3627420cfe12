//! Test helpers for apps that use hopbudget, and the test protos of hopbudget's own gRPC
//! tests and benchmarks.
//!
//! [`hops::HopCapture`] captures the outcome of every hop per test, without a global metrics
//! recorder, and waits for a hop to end.
//!
//! `proto/hop.proto` defines one service, `hopbudget.testkit.Hop`, whose single method does a
//! configurable amount of work, optionally calls a list of downstream hops, and reports the
//! budget each hop saw. The proto is compiled at build time with `protox`, so no `protoc`
//! download is needed. The handler itself lives with the tests, which wire it to hopbudget.

pub mod hops;

/// Code generated from `proto/hop.proto` by tonic-prost-build.
#[allow(
    missing_docs,
    unreachable_pub,
    clippy::all,
    missing_debug_implementations
)]
pub mod pb {
    tonic::include_proto!("hopbudget.testkit");
}

/// The descriptor set of `proto/hop.proto` (a `FileDescriptorSet`, encoded), as a server's
/// build writes it for reflection: what `GrpcServerLayer::with_methods` and the sidecar's
/// `--descriptor-set` read.
pub const HOP_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("hop_descriptor");

/// The full gRPC path of `Hop/Call`, as a profile's `routes` names it.
pub const HOP_CALL_PATH: &str = "/hopbudget.testkit.Hop/Call";

/// The full gRPC path of `Hop/Watch`, the server-streaming method.
pub const HOP_WATCH_PATH: &str = "/hopbudget.testkit.Hop/Watch";
