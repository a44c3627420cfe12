//! The `queue:` section: the queue boundary's message headers and skew allowance.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::issues::Issues;

/// Queue message headers.
///
/// See the [example](crate::Profile#examples).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueSpec {
    /// Absolute deadline, epoch ms.
    pub header: String,
    /// The budget the producing request started with, ms (for accounting).
    pub origin_header: String,
    /// Clock skew tolerated between producer and consumer before a message counts as expired.
    /// It is never added to the work's budget: a message inside it is refused, not run.
    pub skew_allowance_ms: i64,
}

impl Default for QueueSpec {
    fn default() -> Self {
        Self {
            header: crate::codec::QUEUE_DEADLINE_EPOCH_MS.into(),
            origin_header: crate::codec::QUEUE_ORIGIN_BUDGET_MS.into(),
            skew_allowance_ms: 50,
        }
    }
}

impl QueueSpec {
    /// The skew allowance: not negative.
    pub(super) fn check_skew(&self, issues: &mut Issues) -> Duration {
        issues.millis("queue.skew_allowance_ms", self.skew_allowance_ms)
    }

    /// Both header names valid.
    pub(super) fn check_headers(&self, issues: &mut Issues) {
        issues.header_name("queue.header", &self.header);
        issues.header_name("queue.origin_header", &self.origin_header);
    }
}
