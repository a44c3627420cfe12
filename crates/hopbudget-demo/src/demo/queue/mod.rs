//! The background queue of scenario S11: after a successful answer a service hands the
//! order-confirmation e-mail over an in-process queue; workers consume it.
//!
//! The message carries its deadline the way a broker message would, as an absolute
//! `deadline-epoch-ms` header (a message may wait longer than any clock skew), stamped by
//! the producer from a budget rooted when the work was scheduled, *not* from the request's
//! (C12): the e-mail is not cancelled when the response goes out. The consumer checks the
//! deadline before any work and drops a message that waited past it (S10). How each side
//! behaves is the mode's (`HopMode::background_headers`, `HopMode::consume`).
//!
//! The queue is in process by default, so the demo needs nothing installed; with
//! `--broker nats://…` it is a NATS JetStream stream ([`nats`]), consumed through hopbudget's
//! JetStream consumer and its gate.
//!
//! The hand-off side ([`Job`], [`Producer`]) is what a node holds; the workers
//! ([`in_process`], [`nats`]) consume with the node's mode and start after it.
//!
//! So one arrow runs back up, from the workers to `node.rs` (`HopMode`), while a node holds
//! a [`Producer`] from here: a mode decides how its messages are consumed, and the mode
//! and the node refer to each other (see `node.rs`). The two sides are one queue, kept in
//! one folder.

pub mod in_process;
pub mod job;
pub mod nats;
pub mod producer;

pub use job::Job;
pub use producer::Producer;
