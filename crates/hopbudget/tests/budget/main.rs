//! The budget itself, under any protocol: the wire codecs (C2, C9), the wall clock (C1, S5),
//! the learned refuse threshold (C3), hostile input at the edge (C9, C19) and faults
//! downstream through every client layer (C4, C5).
//!
//! One test binary of the integration tests, grouped by area as tonic and axum group theirs
//! (`cargo test -p hopbudget --all-features --test budget`); shared helpers are in
//! `tests/support`.

#[cfg(all(feature = "axum", feature = "reqwest", feature = "grpc"))]
#[path = "../support/grpc/mod.rs"]
mod grpc_support;
#[cfg(all(feature = "axum", feature = "reqwest"))]
#[path = "../support/http.rs"]
mod http_support;

mod codec_props;
mod downstream_faults;
mod hostile_input;
mod learned_threshold;
mod wall_clock;
