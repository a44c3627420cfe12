//! What a receiver (`--listen`, `--kafka`) hands its export requests to: one audit in
//! progress. The audit sits above this room (it reads through it, then analyses and
//! reports), so the receivers know it only by this trait, which the audit's session
//! implements: the arrow runs from the audit down to its inputs, never back up.

use super::Encoding;
use crate::audit::options::AuditOptions;

/// One audit in progress, fed export requests as they arrive.
pub(crate) trait Feed {
    /// What the audit reports (the audit's report).
    type Report: Send + 'static;

    /// A new audit with these settings.
    fn open(opts: &AuditOptions) -> Self;

    /// One export request's body (`label` and `number` name it in problems): its spans go
    /// where a file's line's go. Returns how many of its spans were skipped and why (the
    /// first reason), or `Err` when the body is not a trace request at all.
    fn record(
        &mut self,
        body: &[u8],
        encoding: Encoding,
        label: &str,
        number: u64,
    ) -> Result<(u64, Option<String>), String>;

    /// A record that could not be read at all (only the Kafka consumer has such records).
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    fn problem(&mut self, label: &str, number: u64, reason: String);

    /// The report so far: the traces finished until now (open ones are left open).
    fn snapshot(&self) -> Self::Report;

    /// The final report: every open trace audited.
    fn finish(self) -> Self::Report;
}
