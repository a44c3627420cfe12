//! What a broker adapter's consumer loop has done, counted the same way for every broker.

use std::sync::atomic::{AtomicU64, Ordering};

use super::Reason;

/// What a queue consumer ([`nats::Consumer`](super::nats::Consumer),
/// [`kafka::Consumer`](super::kafka::Consumer)) has done so far, for reports and tests (the
/// metrics say the same through `hopbudget_*`).
///
/// The consumers' examples read it while they run ([`nats::Consumer`](super::nats::Consumer#examples),
/// [`kafka::Consumer`](super::kafka::Consumer#examples)).
///
/// # Examples
///
/// ```
/// use hopbudget::queue::ConsumerStats;
///
/// let stats = ConsumerStats { processed: 5, expired: 4, malformed: 1, ..Default::default() };
/// assert_eq!(stats.processed + stats.dead_lettered(), 10);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConsumerStats {
    /// Handled, then acknowledged (NATS) or committed (Kafka).
    pub processed: u64,
    /// Handler failures, each retried under the budget the message was first admitted with,
    /// until it runs out (rule [C6](crate::contract#c6)).
    pub failed: u64,
    /// Dead-lettered as expired: before any work, or stopped by the deadline.
    pub expired: u64,
    /// Dead-lettered as refused: too little budget left to start.
    pub refused: u64,
    /// Dead-lettered with a malformed deadline header.
    pub malformed: u64,
}

impl ConsumerStats {
    /// Messages acknowledged or committed after being copied to the dead-letter destination.
    ///
    /// See the [example](Self#examples).
    pub fn dead_lettered(&self) -> u64 {
        self.expired + self.refused + self.malformed
    }
}

/// The live counters behind [`ConsumerStats`], shared by the clones of one consumer.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    processed: AtomicU64,
    failed: AtomicU64,
    expired: AtomicU64,
    refused: AtomicU64,
    malformed: AtomicU64,
}

impl Counts {
    pub(crate) fn processed(&self) {
        self.processed.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn failed(&self) {
        self.failed.fetch_add(1, Ordering::Relaxed);
    }

    /// A message whose dead-letter copy is stored, counted under its reason.
    pub(crate) fn dead_lettered(&self, reason: Reason) {
        let counter = match reason {
            Reason::Expired => &self.expired,
            Reason::Refused => &self.refused,
            Reason::Malformed => &self.malformed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> ConsumerStats {
        ConsumerStats {
            processed: self.processed.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            expired: self.expired.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            malformed: self.malformed.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_has_its_own_counter() {
        let c = Counts::default();
        c.processed();
        c.failed();
        c.dead_lettered(Reason::Expired);
        c.dead_lettered(Reason::Expired);
        c.dead_lettered(Reason::Refused);
        c.dead_lettered(Reason::Malformed);
        let s = c.snapshot();
        assert_eq!(
            s,
            ConsumerStats {
                processed: 1,
                failed: 1,
                expired: 2,
                refused: 1,
                malformed: 1,
            }
        );
        assert_eq!(s.dead_lettered(), 4);
    }
}
