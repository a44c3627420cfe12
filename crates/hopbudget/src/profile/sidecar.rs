//! The `sidecar:` section: what `hopbudget proxy` does where a library layer would have the
//! application's own context to go on (rules [C25](crate::contract#c25),
//! [C26](crate::contract#c26)).

use serde::{Deserialize, Serialize};

use super::issues::Issues;

/// Settings only the sidecar reads; the library's layers ignore them.
///
/// ```
/// use hopbudget::profile::{SidecarSpec, Unmatched};
///
/// let p = hopbudget::Profile::from_yaml("sidecar: {unmatched: refuse, sample_ratio: 0.1}", "inline.yaml").unwrap();
/// assert_eq!(p.spec().sidecar.unmatched, Unmatched::Refuse);
/// assert_eq!(SidecarSpec::default().unmatched, Unmatched::EdgeTotal);
/// assert!(hopbudget::Profile::from_yaml("sidecar: {sample_ratio: 2}", "inline.yaml").is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SidecarSpec {
    /// What an outbound call gets when it matches no inbound request in flight (the service
    /// does not carry trace context on it). Whatever the choice, the call is counted and
    /// logged at WARN ([C26](crate::contract#c26)).
    pub unmatched: Unmatched,
    /// The share of requests arriving without trace context whose trace the sidecar starts
    /// as sampled (0 to 1). A caller's own `traceparent` keeps its sampled flag. Unsampled
    /// requests still get ids, so that their outbound calls are matched.
    pub sample_ratio: f64,
}

impl Default for SidecarSpec {
    fn default() -> Self {
        Self {
            unmatched: Unmatched::default(),
            sample_ratio: 1.0,
        }
    }
}

// The ratio is checked to be a number from 0 to 1, never NaN, so equality is total.
impl Eq for SidecarSpec {}

impl SidecarSpec {
    pub(super) fn check(&self, issues: &mut Issues) {
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            issues.push(
                "sidecar.sample_ratio",
                format!("{} is not a share between 0 and 1", self.sample_ratio),
            );
        }
    }
}

/// What an outbound call that matches no inbound request gets from the sidecar.
///
/// See the [example](SidecarSpec).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Unmatched {
    /// The profile's edge total, as a request with no deadline gets ([C8](crate::contract#c8)).
    #[default]
    EdgeTotal,
    /// Refused at the sidecar, before any connection, as a call below the threshold is
    /// ([C3](crate::contract#c3)): the service learns at once that it must carry trace context.
    Refuse,
    /// Sent on with no deadline header; the wait is still bounded by the edge total.
    NoDeadline,
}
