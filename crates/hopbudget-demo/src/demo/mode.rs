//! The name of a run's behaviour (S18): which of the demo's modes every hop of a run has.
//! What each one does is in `behaviour/`; this file is only the name, so that the traces, the
//! results and the report can name a mode without importing how modes behave.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Which behaviour every hop of a run has (S18).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Per-hop fresh timeouts, and each handler on a detached task that survives its caller:
    /// the seeds' incident, and what a service without propagation does in Go or Java.
    Detached,
    /// Per-hop fresh timeouts with Rust's drop-cancellation and nothing else: what a Rust
    /// team has with tonic, axum and `tower::timeout` but without hopbudget.
    Timeouts,
    /// hopbudget at every hop.
    Propagated,
}

impl Mode {
    /// Every mode, in the order the report shows them.
    pub const ALL: [Mode; 3] = [Mode::Detached, Mode::Timeouts, Mode::Propagated];

    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Detached => "detached",
            Mode::Timeouts => "timeouts",
            Mode::Propagated => "propagated",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
