//! One background message, as the producer hands it off and a worker consumes it.

use std::time::Duration;

use http::HeaderMap;
use tokio::time::Instant;

/// One queued message.
#[derive(Debug)]
pub struct Job {
    /// The request that scheduled it.
    pub id: u64,
    /// Message headers (the deadline carrier, when the mode stamps one).
    pub headers: HeaderMap,
    /// How long the work takes.
    pub work: Duration,
    /// When it was scheduled.
    pub scheduled: Instant,
}
