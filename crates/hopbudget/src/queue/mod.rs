//! The queue boundary (rule [C11](crate::contract#c11), scenario [S10](crate::contract#s10)): a deadline that survives a message broker.
//!
//! A queue is where a request most often stops being a request and loses its deadline. When a
//! backlog clears, a consumer can run a three-hour-old job, such as charging a card for an
//! order the user abandoned. So the producer stamps the deadline on the message, and the
//! consumer checks it before any work:
//!
//! - [`Stamper`] writes `deadline-epoch-ms` (absolute: a message can wait longer than any
//!   clock skew) and `deadline-origin-ms` from the current request budget, less the hop margin
//!   (rule [C2](crate::contract#c2)), and refuses to publish a message whose budget cannot cover the next hop ([C3](crate::contract#c3)).
//!   An event that must outlive its request takes a deadline of its own, rooted at publish
//!   time ([`EventDeadline::Own`], rule [C12](crate::contract#c12)); the default inherits the request's.
//! - [`Gate`] reads them when a message is consumed and returns a [`Decision`]:
//!   - *expired* (passed by at least the profile's skew allowance): acknowledge, count
//!     (`hopbudget_queue_expired_total`), republish to a dead-letter destination with reason
//!     `expired` and all its original headers ([`DeadLetter`]); never process. Passed by
//!     less than the allowance: not counted as expired, but refused, since no budget is left
//!     (the allowance is never added to the work's budget);
//!   - *malformed* (naming the header): dead-letter with reason `malformed`, and go on;
//!   - *missing*: the profile's edge total, counted as a missing deadline (rule [C8](crate::contract#c8));
//!   - *live*: an [`Admitted`] message whose work runs under the time left until the stamped
//!     deadline (by the consumer's clock, never more), clamped by a
//!     maximum processing budget, inside its scope and a `Hop` span, so it propagates onward
//!     like any request. The span links to the producer's trace (`traceparent`).
//! - [`HeaderCarrier`] is all either side needs from a broker client.
//!
//! Broker adapters: `nats` (feature `nats`: JetStream publish/consume with a dead-letter
//! stream, and core NATS request/reply) and `kafka` (feature `kafka`, through rdkafka). Any
//! other client is a [`HeaderCarrier`] impl and a loop:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use std::collections::HashMap;
//! use std::time::Duration;
//! use hopbudget::queue::{Decision, Gate, Processed, Stamper};
//! use hopbudget::{Profile, RequestBudget};
//!
//! let profile = Profile::default();
//! // Producer: inside a request with 300 ms left, stamp the message before publishing.
//! let request = RequestBudget::local(Duration::from_millis(300), profile.policy());
//! let mut headers = HashMap::new();
//! request.scope(async { Stamper::new(&profile).stamp(&mut headers) }).await.unwrap();
//!
//! // Consumer: check before any work.
//! let gate = Gate::new(&profile, "orders");
//! match gate.check(&headers) {
//!     Decision::Live(admitted) => match admitted.run(async { /* charge the card */ }).await {
//!         Processed::Completed(()) => { /* acknowledge */ }
//!         Processed::Expired(dead) => { /* acknowledge, republish with `dead.annotate(..)` */ }
//!         Processed::Cancelled => { /* shutting down: leave unacknowledged */ }
//!     },
//!     Decision::Expired(dead) | Decision::Refused(dead) | Decision::Malformed(dead) => {
//!         // copy the message with all its headers, `dead.annotate(&mut copy_headers)`,
//!         // publish the copy to the dead-letter destination, then acknowledge the original.
//!         let _ = dead;
//!     }
//! }
//! # }
//! ```
//!
//! Guide: *The queue boundary*, `docs/guide/queues.md` in the repository.

mod carrier;
mod dead_letter;
mod gate;
#[cfg(any(feature = "nats", feature = "kafka"))]
mod publish_error;
mod stamp;
#[cfg(any(feature = "nats", feature = "kafka"))]
mod stats;
mod trace_link;

#[cfg(feature = "kafka")]
#[cfg_attr(docsrs, doc(cfg(feature = "kafka")))]
pub mod kafka;
#[cfg(feature = "nats")]
#[cfg_attr(docsrs, doc(cfg(feature = "nats")))]
pub mod nats;

pub use carrier::HeaderCarrier;
pub use dead_letter::{DETAIL_HEADER, DeadLetter, REASON_HEADER, Reason};
pub use gate::{Admitted, Decision, Gate, Processed};
pub use stamp::{EventDeadline, Stamp, Stamper};
#[cfg(any(feature = "nats", feature = "kafka"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "nats", feature = "kafka"))))]
pub use stats::ConsumerStats;
pub use trace_link::TRACEPARENT;

#[cfg(test)]
mod tests;
