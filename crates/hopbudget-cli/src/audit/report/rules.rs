//! The thresholds the findings are judged by, set from the command line.

/// Thresholds of the findings.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FindingRules {
    /// Least spans in a spike.
    pub(crate) spike_min: u64,
    /// Least hops at a depth for the S6 finding.
    pub(crate) depth_min: u64,
    /// When a budget reset is an error rather than a warning.
    pub(crate) resets: super::reset_severity::ResetThresholds,
    /// When work for nobody (a server span that went on after its caller's ended) is an
    /// error: the same shape, the time after the caller gave up.
    pub(crate) nobody: super::reset_severity::ResetThresholds,
}

impl FindingRules {
    /// The finding thresholds of `opts`.
    pub(crate) fn of(opts: &crate::audit::options::AuditOptions) -> Self {
        Self {
            spike_min: opts.spike_min,
            depth_min: opts.depth_min,
            resets: super::reset_severity::ResetThresholds {
                error_ms: opts.reset_error_ms,
                error_percent: opts.reset_error_percent,
            },
            nobody: super::reset_severity::ResetThresholds {
                error_ms: opts.nobody_error_ms,
                error_percent: opts.nobody_error_percent,
            },
        }
    }
}
