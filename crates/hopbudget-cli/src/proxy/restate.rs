//! The budget in the service's own carrier: the caller's deadline headers go, and the library's
//! client layer stamps the forward budget in the one carrier the service's stack reads.
//!
//! The client layer computes the forward budget (remaining minus hop margin and transit
//! allowance, rule C2), refuses below the threshold (C3) and stamps it, once, in the carrier
//! chosen for the upstream ([`ClientBudgetLayer::stamp_in`]: `grpc-timeout` for a gRPC
//! service, so grpc-go installs `ctx.Deadline()` itself). The budget reaches the client layer
//! in the request's extensions, never as a header read back: each hop decodes once (the
//! server layer, or the egress reading the service's own deadline) and encodes once.

use hopbudget::Profile;
use hopbudget::SharedProfile;
use hopbudget::codec;
use hopbudget::http::client::ClientBudgetLayer;
use http::{HeaderMap, HeaderName};

use super::options::UpstreamCarrier;

/// Remove every deadline header from the caller's request: the carriers the profile reads
/// (under their profile names) and the well-known ones. What the service is told is the
/// proxy's restated budget alone; a caller's `grpc-timeout: 1H` next to it would let a gRPC
/// stack wait an hour (C9: inbound budgets are not trusted blindly).
pub(crate) fn strip_carriers(headers: &mut HeaderMap, profile: &Profile) {
    codec::remove_deadline_headers(headers, |name| {
        profile
            .inbound()
            .iter()
            .any(|(_, n)| n.as_str() == name.as_str())
    });
}

/// The client layers a hop sends through: one stamps the carrier chosen for HTTP requests,
/// the other the one for gRPC calls.
#[derive(Debug)]
pub(crate) struct Stampers {
    http: ClientBudgetLayer,
    grpc: ClientBudgetLayer,
    // Stamps nothing: for a call the profile sends with no deadline (`sidecar.unmatched`).
    untrusted: ClientBudgetLayer,
}

impl Stampers {
    /// `base` (a trust mode already chosen) in each carrier `carrier` picks.
    pub(crate) fn new(base: ClientBudgetLayer, carrier: UpstreamCarrier) -> Self {
        Self {
            http: base.clone().stamp_in(carrier.for_request(false)),
            grpc: base.clone().stamp_in(carrier.for_request(true)),
            untrusted: base.untrusted(),
        }
    }

    /// A client layer following `profile`, trusting as the profile says (C19).
    pub(crate) fn for_profile(profile: SharedProfile, carrier: UpstreamCarrier) -> Self {
        Self::new(ClientBudgetLayer::new(profile), carrier)
    }

    /// The layer for one request.
    pub(crate) fn get(&self, grpc: bool) -> &ClientBudgetLayer {
        if grpc { &self.grpc } else { &self.http }
    }

    /// The layer that sends no deadline header; the wait is still bounded (C19's mode).
    pub(crate) fn untrusted(&self) -> &ClientBudgetLayer {
        &self.untrusted
    }
}

/// Remove every header whose name `doomed` picks, in one walk over the names.
pub(crate) fn remove_where(headers: &mut HeaderMap, doomed: impl Fn(&HeaderName) -> bool) {
    // Usually zero or one name: the vector allocates only when there is one to remove.
    let found: Vec<HeaderName> = headers.keys().filter(|n| doomed(n)).cloned().collect();
    for name in found {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (HeaderName::from_static(k), v.parse().unwrap()))
            .collect()
    }

    #[test]
    fn every_inbound_deadline_header_is_removed_and_nothing_else() {
        let profile = Profile::default();
        let mut h = headers(&[
            ("grpc-timeout", "1H"),
            ("x-request-timeout-ms", "900"),
            ("x-request-deadline", "1"),
            ("connect-timeout-ms", "5"),
            ("x-envoy-expected-rq-timeout-ms", "7"),
            ("traceparent", "00-x"),
        ]);
        strip_carriers(&mut h, &profile);
        assert_eq!(h.len(), 1, "{h:?}");
        assert!(h.contains_key("traceparent"));
    }

    #[test]
    fn a_profiles_own_inbound_header_is_removed_too() {
        let profile = Profile::from_yaml("headers: {relative_ms: x-budget}", "inline").unwrap();
        let mut h = headers(&[("x-budget", "900"), ("accept", "*/*")]);
        strip_carriers(&mut h, &profile);
        assert!(!h.contains_key("x-budget"), "{h:?}");
        assert!(h.contains_key("accept"));
    }
}
