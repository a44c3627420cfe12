//! The queue boundary on real brokers (C11, S10): NATS JetStream and a Kafka-protocol broker,
//! stamping, the gate before any work, dead letters, and backlogs whose deadlines lapse.
//!
//! One test binary of the integration tests, grouped by area as tonic and axum group theirs
//! (`cargo test -p hopbudget --all-features --test queue`); shared helpers are in
//! `tests/support`.

#[cfg(feature = "kafka")]
#[path = "../support/kafka.rs"]
mod kafka_support;
#[cfg(feature = "nats")]
#[path = "../support/nats.rs"]
mod nats_support;

mod kafka;
mod kafka_backlog;
mod nats;
mod nats_backlog;
