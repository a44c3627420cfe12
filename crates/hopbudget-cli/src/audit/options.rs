//! The settings of one audit ([`AuditOptions`]), with their documented defaults: below the
//! rooms, since the input, the report's thresholds and the merge all read them.

/// Settings of one audit; [`AuditOptions::default`] gives the documented defaults.
#[derive(Clone, Debug)]
pub struct AuditOptions {
    /// A hop may start with this much more than its caller had left before it counts as a
    /// reset (absorbs millisecond rounding). Default 2 ms.
    pub tolerance_ms: i64,
    /// Work that ended at most this long after the client span that called it, after the
    /// request's root span, or after its deadline (`deadline.overrun_ms`) is not late work:
    /// a healthy request winds down 10-30 ms after its answer on a loaded host. Default 50 ms.
    pub late_tolerance_ms: i64,
    /// A trace is finished once its root arrived and this many spans of other traces have
    /// been read since its last span. Default 20,000.
    pub settle_spans: u64,
    /// At most this many spans are held in open traces; past it the least recently active
    /// trace is finished early. Default 250,000 (about 25 MiB).
    pub max_open_spans: usize,
    /// Lines longer than this are reported and skipped. Default 64 MiB.
    pub max_line_bytes: usize,
    /// Problems listed in full (the rest are counted). Default 50.
    pub max_problems: usize,
    /// Least spans in a latency spike. Default 5.
    pub spike_min: u64,
    /// Least hops at a depth for the S6 finding. Default 10.
    pub depth_min: u64,
    /// A budget reset is an error (exit status 1) when the median budget it added is at
    /// least this (ms) and it happened in at least [`reset_error_percent`](Self::reset_error_percent)
    /// of the calls; a smaller or rarer one is a warning. Default 100 ms.
    pub reset_error_ms: u64,
    /// See [`reset_error_ms`](Self::reset_error_ms). Default 5 (%).
    pub reset_error_percent: f64,
    /// Work for nobody is an error (exit status 1) when a service's server spans went on
    /// after their caller's client span had ended in at least
    /// [`nobody_error_percent`](Self::nobody_error_percent) of its calls, by a median of at
    /// least this (ms) over those calls; otherwise a warning. Default 100 ms.
    pub nobody_error_ms: u64,
    /// See [`nobody_error_ms`](Self::nobody_error_ms). Default 5 (%).
    pub nobody_error_percent: f64,
}

impl Default for AuditOptions {
    fn default() -> Self {
        Self {
            tolerance_ms: 2,
            late_tolerance_ms: 50,
            settle_spans: 20_000,
            max_open_spans: 250_000,
            max_line_bytes: 64 << 20,
            max_problems: 50,
            spike_min: 5,
            depth_min: 10,
            reset_error_ms: 100,
            reset_error_percent: 5.0,
            nobody_error_ms: 100,
            nobody_error_percent: 5.0,
        }
    }
}
