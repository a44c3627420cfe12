//! The `outbound:` section: the carrier written on outbound HTTP calls, and the hosts that may
//! see deadline headers (rule [C19](crate::contract#c19)).

use serde::{Deserialize, Serialize};

use super::issues::Issues;
use super::trust::{self, TrustedHosts, UnknownDestination};
use crate::codec::Carrier;

/// Outbound encodings.
///
/// See the [example](crate::Profile#examples).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutboundSpec {
    /// `relative-ms` (default, immune to clock skew) or `epoch-ms` (needs trusted clocks).
    pub http: Carrier,
    /// Hosts that may see deadline headers (rule [C19](crate::contract#c19),
    /// [S16](crate::contract#s16)): `*`, the keywords `loopback`, `private`, `single-label`, a
    /// suffix `*.corp.internal`, or one host name or address. Listing hosts replaces the default
    /// (loopback, private addresses, names without a dot, `*.internal`, `*.local`, `*.svc`,
    /// `*.cluster.local`).
    pub trusted_hosts: Vec<String>,
    /// A call that names no host: `trusted` (default) or `untrusted`. See
    /// [`UnknownDestination`].
    pub unknown_destination: UnknownDestination,
}

impl Default for OutboundSpec {
    fn default() -> Self {
        Self {
            http: Carrier::RelativeMs,
            trusted_hosts: trust::default_patterns(),
            unknown_destination: UnknownDestination::default(),
        }
    }
}

impl OutboundSpec {
    /// An HTTP encoding, and trusted-host patterns that parse.
    pub(super) fn check(&self, issues: &mut Issues) -> TrustedHosts {
        if !matches!(self.http, Carrier::RelativeMs | Carrier::EpochMs) {
            issues.push(
                "outbound.http",
                format!(
                    "`{}` is not an HTTP encoding; use `relative-ms` or `epoch-ms`",
                    self.http
                ),
            );
        }
        TrustedHosts::parse(&self.trusted_hosts).unwrap_or_else(|(i, reason)| {
            issues.push(&format!("outbound.trusted_hosts[{i}]"), reason);
            TrustedHosts::none()
        })
    }
}
