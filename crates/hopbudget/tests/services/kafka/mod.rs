//! The queue boundary on a real Kafka-protocol broker (C11, S10): stamping, the gate before
//! any work, the dead-letter topic, and a backlog whose deadlines lapse while it waits. The
//! broker is `KAFKA_BROKERS`, or a `tansu` the tests start (see `support/kafka.rs`).

mod backlog;
mod queue;
