//! Collecting a profile's problems: every check reports and goes on, so one run names them all.

use std::time::Duration;

use http::HeaderName;

use crate::config::Issue;

/// The problems found so far, in the order they were found (the order `profile check` prints).
#[derive(Default)]
pub(super) struct Issues(Vec<Issue>);

impl Issues {
    /// Report a problem with `field`.
    pub(super) fn push(&mut self, field: &str, reason: String) {
        self.0.push(Issue {
            field: field.into(),
            reason,
        });
    }

    /// A duration in whole milliseconds that may be zero; a negative one is reported and read
    /// as zero.
    pub(super) fn millis(&mut self, field: &str, v: i64) -> Duration {
        self.checked_millis(field, v, false)
    }

    /// A duration in whole milliseconds that must be greater than zero.
    pub(super) fn positive_millis(&mut self, field: &str, v: i64) -> Duration {
        self.checked_millis(field, v, true)
    }

    fn checked_millis(&mut self, field: &str, v: i64, positive: bool) -> Duration {
        if v < 0 {
            self.push(field, format!("must not be negative (got {v})"));
            Duration::ZERO
        } else if positive && v == 0 {
            self.push(field, "must be greater than zero".into());
            Duration::ZERO
        } else {
            Duration::from_millis(v as u64)
        }
    }

    /// A count that must not be negative (and, if `positive`, not zero); a bad one reads as 0.
    pub(super) fn count(&mut self, field: &str, v: i64, positive: bool) -> usize {
        if v < 0 {
            self.push(field, format!("must not be negative (got {v})"));
        } else if positive && v == 0 {
            self.push(field, "must be greater than zero".into());
        }
        usize::try_from(v).unwrap_or(0)
    }

    /// An HTTP header name; a bad one is reported and replaced by a valid placeholder.
    pub(super) fn header_name(&mut self, field: &str, name: &str) -> HeaderName {
        HeaderName::from_bytes(name.as_bytes()).unwrap_or_else(|_| {
            self.push(field, format!("`{name}` is not a valid HTTP header name"));
            HeaderName::from_static(crate::codec::REQUEST_TIMEOUT_MS)
        })
    }

    /// `Ok` when nothing was reported, else every problem.
    pub(super) fn finish(self) -> Result<(), Vec<Issue>> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(self.0)
        }
    }
}
