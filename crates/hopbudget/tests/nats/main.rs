//! The queue boundary on a real NATS JetStream server (C11, S10): stamping, the gate before
//! any work, the dead-letter stream, core NATS request/reply, and a backlog whose deadlines
//! lapse while it waits.
//!
//! One test binary of the integration tests (`cargo test -p hopbudget --all-features --test
//! nats`); shared helpers are in `tests/support`. Apart from the Kafka tests because without
//! a server (and without `HOPBUDGET_REQUIRE_SERVICES=1`) `support/nats.rs` skips by ending the
//! process with status 0, which must not take other brokers' tests with it.

#[cfg(feature = "nats")]
#[path = "../support/nats.rs"]
mod nats_support;

mod backlog;
mod queue;
