//! Services written in Go, built by the tests that use them: the library's interop tests'
//! helpers (`crates/hopbudget/tests/support/go.rs`, one file for both crates), and the
//! service runner they are started with here.

#[path = "../../../../hopbudget/tests/support/go.rs"]
mod shared;

// Not every test binary that includes this module names each of them.
#[allow(unused_imports)]
pub use super::service::Service as GoService;
#[allow(unused_imports)]
pub use shared::{build, skip_unless_built};
