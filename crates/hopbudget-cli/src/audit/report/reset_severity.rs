//! How serious a budget reset is: it scales with how much budget the reset added and how
//! often it happened, so that a 12 ms gain in 1 of 200 calls (rounding, a timer's jitter, one
//! odd code path) is not the same finding, nor the same exit status, as 1,281 ms in 200 of 200
//! (a service that starts its own budget on every call, S13).
//!
//! A reset is an **error** (exit status 1) when it is both large and common: the median budget
//! it added is at least `reset_error_ms` (default 100 ms) and it happened in at least
//! `reset_error_percent` (default 5%) of the compared calls. Otherwise it is a **warning**.
//! 100 ms is well above millisecond rounding and timer lateness on a loaded host (a few ms) and
//! about the least that moves a callee's timeout decision for a typical service (budgets of a
//! few hundred ms to seconds); 5% (1 call in 20) is a code path, not a fluke.

use super::finding::Severity;

/// The thresholds above.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ResetThresholds {
    /// Least median gain (ms) of an error.
    pub(crate) error_ms: u64,
    /// Least share of calls (percent) of an error.
    pub(crate) error_percent: f64,
}

impl Default for ResetThresholds {
    fn default() -> Self {
        Self {
            error_ms: 100,
            error_percent: 5.0,
        }
    }
}

impl ResetThresholds {
    /// The severity of `resets` of `calls` calls that added `median_ms` (median), and the
    /// words that say why, for the finding's detail.
    pub(crate) fn judge(self, median_ms: u64, resets: u64, calls: u64) -> (Severity, String) {
        self.judge_as(median_ms, resets, calls, "added")
    }

    /// [`judge`](Self::judge) for another measure of the same shape: `what` says what the
    /// milliseconds are (`added`, `after the caller gave up`). Work for nobody (#50 item 6) is
    /// judged so: an error when at least `error_ms` (median) in at least `error_percent` of a
    /// service's calls.
    pub(crate) fn judge_as(
        self,
        median_ms: u64,
        resets: u64,
        calls: u64,
        what: &str,
    ) -> (Severity, String) {
        let pct = percent(resets, calls);
        let large = median_ms >= self.error_ms;
        let common = pct >= self.error_percent;
        let severity = if large && common {
            Severity::Error
        } else {
            Severity::Warning
        };
        let why = match (large, common) {
            (true, true) => format!(
                "an error: at least {} ms {what} in at least {}% of calls",
                self.error_ms, self.error_percent
            ),
            (false, _) => format!(
                "a warning: under {} ms {what} (median {median_ms} ms)",
                self.error_ms
            ),
            (true, false) => format!(
                "a warning: in under {}% of calls ({pct:.1}%)",
                self.error_percent
            ),
        };
        (severity, why)
    }
}

/// `part` of `whole` in percent (0 when there is no whole).
pub(crate) fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_and_common_is_an_error_anything_less_a_warning() {
        let t = ResetThresholds::default();
        assert_eq!(t.judge(1_281, 200, 200).0, Severity::Error);
        assert_eq!(t.judge(12, 1, 200).0, Severity::Warning);
        assert_eq!(t.judge(100, 10, 200).0, Severity::Error);
        assert_eq!(t.judge(99, 200, 200).0, Severity::Warning);
        assert_eq!(t.judge(5_000, 9, 200).0, Severity::Warning);
        assert!(
            t.judge(5_000, 9, 200)
                .1
                .contains("under 5% of calls (4.5%)")
        );
    }
}
