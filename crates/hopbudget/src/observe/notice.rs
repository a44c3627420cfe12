//! The lines an operator sees by default (issue #33): requests refused before work ([C3](crate::contract#c3)) and
//! requests that arrived with no deadline ([C8](crate::contract#c8)), logged at INFO on the `hopbudget::notice`
//! target, at most a few a second of each kind for the whole process, so an overload that
//! refuses thousands of requests a second does not flood the log. The count of lines left out
//! rides on the next line that is written.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// A per-second line budget shared by every thread. Approximate at the edge of a second (two
/// threads may both start a new window), exact enough for a log.
#[derive(Debug)]
pub(crate) struct RateLimit {
    /// The second, counted from the first use, that `used` belongs to.
    window: AtomicU64,
    used: AtomicU32,
    left_out: AtomicU64,
}

/// What [`RateLimit::admit`] decided.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Write the line, saying how many were left out before it.
    Write { left_out: u64 },
    /// Leave it out.
    Skip,
}

impl RateLimit {
    pub(crate) const fn new() -> Self {
        Self {
            window: AtomicU64::new(0),
            used: AtomicU32::new(0),
            left_out: AtomicU64::new(0),
        }
    }

    /// Whether a line may be written in `second` with at most `per_s` lines a second.
    pub(crate) fn admit(&self, second: u64, per_s: u32) -> Admit {
        if per_s == 0 {
            return Admit::Skip;
        }
        let window = self.window.load(Ordering::Relaxed);
        if second != window
            && self
                .window
                .compare_exchange(window, second, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.used.store(0, Ordering::Relaxed);
        }
        if self.used.fetch_add(1, Ordering::Relaxed) < per_s {
            Admit::Write {
                left_out: self.left_out.swap(0, Ordering::Relaxed),
            }
        } else {
            self.left_out.fetch_add(1, Ordering::Relaxed);
            Admit::Skip
        }
    }
}

static REFUSED: RateLimit = RateLimit::new();
static MISSING: RateLimit = RateLimit::new();

/// Whole seconds on tokio's clock since the first notice (paused clocks in tests move it).
fn second() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs()
}

/// Log a refusal before work, rate-limited; unenforced ([C24](crate::contract#c24)), the refusal that enforcement
/// would have made, with the request let through.
pub(crate) fn refused(
    service: &str,
    route: &str,
    required: Duration,
    remaining: Duration,
    per_s: u32,
    enforced: bool,
) {
    if !tracing::enabled!(target: "hopbudget::notice", tracing::Level::INFO) {
        return;
    }
    if let Admit::Write { left_out } = REFUSED.admit(second(), per_s) {
        let what = if enforced {
            "refused before work"
        } else {
            "would be refused before work, let through as enforcement is off (C24)"
        };
        tracing::info!(
            target: "hopbudget::notice",
            service,
            route,
            required_ms = millis(required),
            remaining_ms = millis(remaining),
            left_out,
            "{what}: the budget left cannot cover the route's minimum (C3)"
        );
    }
}

/// Log a request that arrived with no deadline, rate-limited.
pub(crate) fn missing(service: &str, route: &str, edge_total: Duration, per_s: u32) {
    if !tracing::enabled!(target: "hopbudget::notice", tracing::Level::INFO) {
        return;
    }
    if let Admit::Write { left_out } = MISSING.admit(second(), per_s) {
        tracing::info!(
            target: "hopbudget::notice",
            service,
            route,
            edge_total_ms = millis(edge_total),
            left_out,
            "deadline received: none; using the edge total (C8)"
        );
    }
}

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_per_s_lines_a_second_and_the_next_says_what_was_left_out() {
        let limit = RateLimit::new();
        let written = |second| {
            (0..10)
                .filter(|_| limit.admit(second, 3) != Admit::Skip)
                .count()
        };
        assert_eq!(written(0), 3);
        assert_eq!(limit.admit(1, 3), Admit::Write { left_out: 7 });
        assert_eq!(written(1), 2);
        assert_eq!(limit.admit(2, 0), Admit::Skip, "0 writes nothing");
    }
}
