//! NATS at the queue boundary (feature `nats`, through async-nats).
//!
//! - [`Publisher`]: JetStream publishes stamped with the current request's deadline
//!   ([`Stamper`](super::Stamper)), refused before any byte is sent when the budget cannot
//!   cover the hop (rule [C3](crate::contract#c3)).
//! - [`Consumer`]: a JetStream pull-consumer loop with the [`Gate`](super::Gate) before any
//!   work. Expired, refused and malformed messages are republished to a dead-letter subject
//!   (with all their headers, plus the reason) and only then acknowledged; live ones run the
//!   handler under their budget and are acknowledged when it completes. A handler error
//!   retries the message, after a short pause, under the budget it was first admitted with
//!   (rule [C6](crate::contract#c6): never a fresh one, even for a message without a deadline header); when that
//!   runs out it is dead-lettered as expired. A message that expires while waiting for a work
//!   slot is dead-lettered as expired before any work. A consumer stopped mid-work leaves the
//!   message unacknowledged, so it comes back (rule [C5](crate::contract#c5)). Nothing is lost.
//! - [`Requester`] and [`Responder`]: core NATS request/reply with the budget in a header,
//!   like an HTTP hop: relative milliseconds (skew-immune), the wait bounded by the forward
//!   budget, and a responder that refuses below its threshold and answers with the refusal
//!   headers (`x-deadline-outcome: refused`, `x-deadline-required-ms`,
//!   `x-deadline-remaining-ms`).
//!
//! A NATS server with JetStream is all it needs (`nats-server -js`). Header values in NATS are
//! strings, which is all the boundary writes.
//!
//! # Examples
//!
//! A producer and a consumer; they need a live broker, so the example is only compiled
//! (`no_run`).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use async_nats::jetstream::{self, consumer::pull, stream};
//! use hopbudget::queue::nats::{Consumer, Publisher};
//! use hopbudget::queue::Gate;
//! use hopbudget::Profile;
//!
//! let profile = Profile::default().with_service("billing");
//! let client = async_nats::connect("127.0.0.1:4222").await?;
//! let js = jetstream::new(client);
//! js.get_or_create_stream(stream::Config {
//!     name: "ORDERS".into(),
//!     subjects: vec!["orders.>".into()],
//!     ..Default::default()
//! })
//! .await?;
//!
//! // Producer: inside a request, the message carries what is left of its budget.
//! Publisher::new(js.clone(), &profile)
//!     .publish("orders.charge", "order 42".into())
//!     .await?;
//!
//! // Consumer: nothing runs for a message whose deadline passed in the backlog.
//! let pull = js
//!     .get_stream("ORDERS")
//!     .await?
//!     .get_or_create_consumer("billing", pull::Config {
//!         durable_name: Some("billing".into()),
//!         ..Default::default()
//!     })
//!     .await?;
//! let consumer = Consumer::new(Gate::new(&profile, "orders"), js, "dead.orders");
//! consumer
//!     .run(pull, |message: async_nats::Message| async move {
//!         // charge the card for `message.payload`
//!         Ok::<(), std::convert::Infallible>(())
//!     })
//!     .await?;
//! # Ok(()) }
//! ```

mod consumer;
mod publisher;
mod request;

pub use consumer::{ConsumeError, Consumer};
pub use publisher::{PublishError, Publisher};
pub use request::{RequestError, Requester, Responder};

use super::HeaderCarrier;

impl HeaderCarrier for async_nats::HeaderMap {
    fn get(&self, name: &str) -> Option<&[u8]> {
        async_nats::HeaderMap::get(self, name).map(|v| v.as_str().as_bytes())
    }

    fn set(&mut self, name: &str, value: &str) {
        self.insert(name, value);
    }
}
