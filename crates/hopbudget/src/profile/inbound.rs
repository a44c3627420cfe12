//! The `inbound:` section: the carriers read on arrival (the tightest wins, rule
//! [C9](crate::contract#c9)).

use http::HeaderName;

use super::issues::Issues;
use crate::codec::{Carrier, InboundCarriers};

/// Each carrier listed once, none of them `queue`; the HTTP carriers under the names of the
/// `headers:` section.
pub(super) fn check(
    inbound: &[Carrier],
    relative: &HeaderName,
    epoch: &HeaderName,
    issues: &mut Issues,
) -> InboundCarriers {
    for (i, c) in inbound.iter().enumerate() {
        if inbound[..i].contains(c) {
            issues.push(&format!("inbound[{i}]"), format!("`{c}` is listed twice"));
        }
        if *c == Carrier::Queue {
            issues.push(
                &format!("inbound[{i}]"),
                "`queue` is read by the queue boundary (see `queue:`), not by servers".into(),
            );
        }
    }
    InboundCarriers::with_names(inbound.iter().map(|c| {
        let name = match c {
            Carrier::RelativeMs => relative.clone(),
            Carrier::EpochMs => epoch.clone(),
            other => HeaderName::from_static(other.default_header()),
        };
        (*c, name)
    }))
}
