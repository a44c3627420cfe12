//! hopbudget against real services: budgeted PostgreSQL queries, the Redis read-through cache,
//! and the queue boundary on NATS JetStream and on a Kafka-protocol broker.
//!
//! One test binary of the integration tests, grouped by area as tonic and axum group theirs
//! (`cargo test -p hopbudget --all-features --test services`); shared helpers are in
//! `tests/support`. It needs, at their standard addresses (each overridable):
//!
//! - PostgreSQL (`DATABASE_URL`, trust auth, database `test`) for `postgres`;
//! - Redis (`REDIS_URL`) for `redis_stale`, whose frozen- and gone-server tests also start a
//!   `redis-server` of their own;
//! - NATS with JetStream (`NATS_URL`) for `nats`;
//! - for `kafka` (feature `kafka`), the broker at `KAFKA_BROKERS`, or `tansu` on `PATH`, which
//!   the first Kafka test starts on the default address.
//!
//! A test whose PostgreSQL, Redis or NATS is missing says what to start and returns, so the
//! other services' tests still run; under `HOPBUDGET_REQUIRE_SERVICES=1` (CI,
//! `scripts/test-all`) it fails instead (`support/services.rs`). A missing Kafka broker
//! fails the Kafka tests. Every test names its keys, streams, topics, tables and SQL markers
//! for itself and its process, so the four services' tests run in parallel.

#[cfg(feature = "kafka")]
#[path = "../support/kafka.rs"]
mod kafka_support;
#[cfg(feature = "nats")]
#[path = "../support/nats.rs"]
mod nats_support;
#[cfg(feature = "postgres")]
#[path = "../support/postgres.rs"]
mod postgres_support;
#[cfg(any(feature = "postgres", feature = "redis", feature = "nats"))]
#[path = "../support/services.rs"]
mod services_support;

#[cfg(feature = "kafka")]
mod kafka;
mod nats;
mod postgres;
mod redis_stale;
