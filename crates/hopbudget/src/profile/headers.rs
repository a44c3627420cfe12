//! The `headers:` section: the header names of the HTTP carriers.

use http::HeaderName;
use serde::{Deserialize, Serialize};

use super::issues::Issues;

/// Header names of the HTTP carriers; gRPC, Connect and Envoy names are fixed by their specs.
///
/// See the [example](crate::Profile#examples).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HeaderSpec {
    /// Relative milliseconds.
    pub relative_ms: String,
    /// Absolute epoch milliseconds.
    pub epoch_ms: String,
}

impl Default for HeaderSpec {
    fn default() -> Self {
        Self {
            relative_ms: crate::codec::REQUEST_TIMEOUT_MS.into(),
            epoch_ms: crate::codec::REQUEST_DEADLINE.into(),
        }
    }
}

impl HeaderSpec {
    /// Both names valid HTTP header names: (relative, epoch).
    pub(super) fn check(&self, issues: &mut Issues) -> (HeaderName, HeaderName) {
        (
            issues.header_name("headers.relative_ms", &self.relative_ms),
            issues.header_name("headers.epoch_ms", &self.epoch_ms),
        )
    }
}
