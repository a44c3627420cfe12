//! The queue boundary on a real NATS JetStream server (C11, S10): stamping, the gate before
//! any work, the dead-letter stream, core NATS request/reply, and a backlog whose deadlines
//! lapse while it waits. Every test needs the server (`nats_support::connect`).

mod backlog;
mod queue;
