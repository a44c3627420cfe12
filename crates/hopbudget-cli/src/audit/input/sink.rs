//! Where the reader hands decoded spans, and what it counted.

use crate::audit::span::{Interner, Span};

/// Where decoded spans go, line by line.
pub(crate) trait SpanSink {
    /// The names table spans are interned in.
    fn names(&mut self) -> &mut Interner;
    /// One span.
    fn span(&mut self, span: Span);
    /// A line (one export batch) has been read in full: a good moment to finish traces.
    fn line_end(&mut self);
}

/// Counts of what was read.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct InputStats {
    /// Files opened.
    pub files: u64,
    /// Non-empty lines read.
    pub lines: u64,
    /// Lines that could not be decoded (each is a problem).
    pub bad_lines: u64,
    /// OTLP/HTTP export requests received (`--listen`); each counts as a line too.
    pub requests: u64,
    /// Spans decoded.
    pub spans: u64,
    /// Spans skipped because a field was missing or invalid (each is a problem).
    pub bad_spans: u64,
    /// Spans whose ids were base64 (the generic protobuf JSON mapping, what a naive converter
    /// writes) instead of OTLP JSON's hex: decoded and audited.
    pub base64_ids: u64,
}

impl InputStats {
    /// Add `other`'s counts (a batch decoded on another thread).
    pub(crate) fn add(&mut self, other: &InputStats) {
        self.files += other.files;
        self.lines += other.lines;
        self.bad_lines += other.bad_lines;
        self.requests += other.requests;
        self.spans += other.spans;
        self.bad_spans += other.bad_spans;
        self.base64_ids += other.base64_ids;
    }
}

/// For tests: every span decoded (in order), the lines ended, and the names table.
#[cfg(test)]
pub(crate) struct Collect(pub(crate) Vec<Span>, pub(crate) u64, pub(crate) Interner);

#[cfg(test)]
impl SpanSink for Collect {
    fn names(&mut self) -> &mut Interner {
        &mut self.2
    }
    fn span(&mut self, span: Span) {
        self.0.push(span);
    }
    fn line_end(&mut self) {
        self.1 += 1;
    }
}
