//! Kafka at the queue boundary (feature `kafka`, through rdkafka; librdkafka is built from
//! source with its own configure script, so the machine needs a C compiler and make).
//!
//! - [`Producer`]: records stamped with the current request's deadline
//!   ([`Stamper`](super::Stamper)), refused before anything is queued when the budget cannot
//!   cover the hop (rule [C3](crate::contract#c3)).
//! - [`Consumer`]: a loop over an rdkafka `StreamConsumer` (with `enable.auto.commit=false`)
//!   with the [`Gate`](super::Gate) before any work. Expired, refused and malformed records
//!   are produced to a dead-letter topic (same key and payload, all headers, plus the reason)
//!   and their offset is committed only once the copy is delivered; live ones run the handler
//!   under their budget and are committed when it completes. A handler error retries the
//!   record, after a short pause, for as long as its deadline allows (rule [C6](crate::contract#c6): retries spend
//!   what is left of the budget it was first admitted with, never a fresh one, even for a
//!   record without a deadline header); then it is dead-lettered as expired. Records are
//!   handled one at a time, in partition order, so a committed offset never skips one.
//!
//! # Examples
//!
//! A producer and a consumer; they need a live broker, so the example is only compiled
//! (`no_run`).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use rdkafka::ClientConfig;
//! use rdkafka::consumer::{Consumer as _, StreamConsumer};
//! use rdkafka::producer::FutureProducer;
//! use hopbudget::queue::kafka::{Consumer, Producer};
//! use hopbudget::queue::Gate;
//! use hopbudget::Profile;
//!
//! let profile = Profile::default().with_service("billing");
//! let producer: FutureProducer = ClientConfig::new()
//!     .set("bootstrap.servers", "127.0.0.1:19092")
//!     .create()?;
//! Producer::new(producer.clone(), &profile)
//!     .send("orders", Some("42"), "order 42", rdkafka::message::OwnedHeaders::new())
//!     .await?;
//!
//! let records: StreamConsumer = ClientConfig::new()
//!     .set("bootstrap.servers", "127.0.0.1:19092")
//!     .set("group.id", "billing")
//!     .set("enable.auto.commit", "false")
//!     .create()?;
//! records.subscribe(&["orders"])?;
//! Consumer::new(Gate::new(&profile, "orders"), producer, "orders.dead")
//!     .run(&records, |record| async move {
//!         // charge the card for `record`
//!         Ok::<(), std::convert::Infallible>(())
//!     })
//!     .await?;
//! # Ok(()) }
//! ```

mod consumer;
mod producer;

pub use consumer::Consumer;
pub use producer::{Producer, PublishError};

use rdkafka::message::{BorrowedHeaders, Header, Headers, OwnedHeaders};

use super::HeaderCarrier;

fn find<'h, H: Headers>(headers: &'h H, name: &str) -> Option<&'h [u8]> {
    // A header present with a null value reads as an empty one: malformed, not missing.
    (0..headers.count())
        .filter_map(|i| headers.try_get(i))
        .find(|h| h.key == name)
        .map(|h| h.value.unwrap_or_default())
}

impl HeaderCarrier for OwnedHeaders {
    fn get(&self, name: &str) -> Option<&[u8]> {
        find(self, name)
    }

    fn set(&mut self, name: &str, value: &str) {
        // librdkafka headers are append-only: rebuild without the old value, then append.
        let mut rebuilt = OwnedHeaders::new_with_capacity(self.count() + 1);
        for h in (0..self.count()).filter_map(|i| self.try_get(i)) {
            if h.key != name {
                rebuilt = rebuilt.insert(h);
            }
        }
        *self = rebuilt.insert(Header {
            key: name,
            value: Some(value),
        });
    }
}

/// A consumed record's headers, read in place: the gate only reads, so a record that is
/// processed costs no copy of its headers.
struct Received<'a>(Option<&'a BorrowedHeaders>);

impl HeaderCarrier for Received<'_> {
    fn get(&self, name: &str) -> Option<&[u8]> {
        self.0.and_then(|h| find(h, name))
    }

    fn set(&mut self, _name: &str, _value: &str) {
        // Never called: the consumer writes only on the dead-letter copy, an `OwnedHeaders`.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_headers_replace_on_set_and_keep_the_rest() {
        let mut h = OwnedHeaders::new().insert(Header {
            key: "order-id",
            value: Some("42"),
        });
        h.set("deadline-epoch-ms", "1");
        h.set("deadline-epoch-ms", "2");
        assert_eq!(HeaderCarrier::get(&h, "deadline-epoch-ms"), Some(&b"2"[..]));
        assert_eq!(HeaderCarrier::get(&h, "order-id"), Some(&b"42"[..]));
        assert_eq!(h.count(), 2);
    }
}
