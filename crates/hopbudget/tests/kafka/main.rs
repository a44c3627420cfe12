//! The queue boundary on a real Kafka-protocol broker (C11, S10): stamping, the gate before
//! any work, the dead-letter topic, and a backlog whose deadlines lapse while it waits. The
//! broker is `KAFKA_BROKERS`, or a `tansu` the tests start (see `support/kafka.rs`).
//!
//! One test binary of the integration tests (`cargo test -p hopbudget --all-features --test
//! kafka`); shared helpers are in `tests/support`.

#[cfg(feature = "kafka")]
#[path = "../support/kafka.rs"]
mod kafka_support;

mod backlog;
mod queue;
