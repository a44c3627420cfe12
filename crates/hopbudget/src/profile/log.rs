//! The `log:` section: what the server layers log of their hops.

use serde::{Deserialize, Serialize};

/// What the server layers log, through `tracing`, of the hops they serve.
///
/// Two kinds of line, on two targets an operator can filter on:
///
/// - **`hopbudget::hop`**, with `hops: true`: one INFO line at every hop's end, with the
///   service, the route, the protocol, the outcome, the budget at arrival and its source,
///   and the time the hop took. Off by default: a line per request is a choice.
/// - **`hopbudget::notice`**: requests refused before work ([C3](crate::contract#c3)) and requests
///   that arrived with no deadline ([C8](crate::contract#c8), `deadline received: none`), at INFO,
///   so they show under the usual `info` filter. At most `notices_per_s` lines a second for each of
///   the two kinds in the whole process; a line after a quiet spell says how many were left out.
///   `0` turns them off.
///
/// ```
/// let p = hopbudget::Profile::from_yaml("log: {hops: true, notices_per_s: 5}", "inline.yaml").unwrap();
/// assert!(p.spec().log.hops);
/// assert_eq!(hopbudget::Profile::default().spec().log.notices_per_s, 1);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogSpec {
    /// One INFO line per hop end (target `hopbudget::hop`).
    pub hops: bool,
    /// Refusals and missing deadlines logged at INFO (target `hopbudget::notice`): at most
    /// this many lines a second of each kind; 0 logs none.
    pub notices_per_s: u32,
}

impl Default for LogSpec {
    fn default() -> Self {
        Self {
            hops: false,
            notices_per_s: 1,
        }
    }
}
