//! What the CLI's test binaries share (each declares `mod support;` and uses a part):
//! the `hopbudget` binary run to its end ([`command`]), the Python SDK's spans to edit
//! ([`fixture`]) and what merging audits must keep ([`merge`]), the `hopbudget proxy` binary as
//! a real process with a client that hides nothing ([`proxy`]), the Grafana dashboard's
//! queries ([`dashboard`]), the locks of tests that must not overlap ([`serial`]), and the
//! Kafka broker of the library's tests ([`kafka_broker`], feature `kafka`).
#![allow(dead_code, unreachable_pub)]

pub mod command;
pub mod dashboard;
pub mod fixture;
#[cfg(feature = "kafka")]
#[path = "../../../hopbudget/tests/support/kafka.rs"]
pub mod kafka_broker;
pub mod merge;
pub mod proxy;
pub mod serial;
