//! The budget in the service's own carrier: the caller's deadline headers go, the forward
//! budget the client layer computed comes back in the one carrier the service's stack reads.
//!
//! The library's `ClientBudget` computes the forward budget (remaining minus hop margin and
//! transit allowance, rule C2), refuses below the threshold (C3) and stamps it in the
//! profile's outbound HTTP carrier. Below it, [`restate`] moves that value into the carrier
//! chosen for the upstream (`grpc-timeout` for a gRPC service, so grpc-go installs
//! `ctx.Deadline()` itself), so the arithmetic stays in one place and only the spelling
//! happens here. Every encoder rounds down, so restating never grows the budget.

use std::time::Duration;

use hopbudget::Profile;
use hopbudget::clock::{SystemClock, WallClock};
use hopbudget::codec::{self, Carrier, epoch, grpc_timeout, millis};
use http::{HeaderMap, HeaderName};

/// Remove every deadline header from the caller's request: the carriers the profile reads
/// (under their profile names) and the well-known ones. What the service is told is the
/// proxy's restated budget alone; a caller's `grpc-timeout: 1H` next to it would let a gRPC
/// stack wait an hour (C9: inbound budgets are not trusted blindly).
pub(crate) fn strip_carriers(headers: &mut HeaderMap, profile: &Profile) {
    // One walk over the request's few headers, comparing names, instead of one hashed
    // `remove` per carrier name (each parsing its `&str` again): most requests carry one
    // deadline header and a handful of others.
    remove_where(headers, |name| {
        let name = name.as_str();
        WELL_KNOWN.contains(&name) || profile.inbound().iter().any(|(_, n)| n.as_str() == name)
    });
}

/// The deadline headers every stack knows, removed whatever the profile reads.
const WELL_KNOWN: [&str; 5] = [
    codec::GRPC_TIMEOUT,
    codec::REQUEST_TIMEOUT_MS,
    codec::REQUEST_DEADLINE,
    codec::CONNECT_TIMEOUT_MS,
    codec::ENVOY_EXPECTED_RQ_TIMEOUT_MS,
];

/// Remove every header whose name `doomed` picks, in one walk over the names.
pub(crate) fn remove_where(headers: &mut HeaderMap, doomed: impl Fn(&HeaderName) -> bool) {
    // Usually zero or one name: the vector allocates only when there is one to remove.
    let found: Vec<HeaderName> = headers.keys().filter(|n| doomed(n)).cloned().collect();
    for name in found {
        headers.remove(name);
    }
}

/// Move the budget the client layer stamped (in the profile's outbound carrier) into
/// `target`. `now_unix_ms` is read only when an epoch carrier is involved (C1).
pub(crate) fn restate(
    headers: &mut HeaderMap,
    profile: &Profile,
    target: Carrier,
    now_unix_ms: impl Fn() -> u64,
) {
    let (stamped, name) = profile.outbound_http();
    if stamped == target && name.as_str() == target.default_header() {
        return;
    }
    // No stamp: the destination was judged untrusted (C19); nothing to restate.
    let Some(value) = headers.remove(name) else {
        return;
    };
    let Ok(forward) = stamped.decode(value.as_bytes(), &now_unix_ms) else {
        // The client layer wrote it; it always parses. Sending none beats sending a guess.
        tracing::warn!(header = %name, "could not read back the stamped budget; none sent");
        return;
    };
    headers.insert(
        HeaderName::from_static(target.default_header()),
        encode(target, forward, now_unix_ms),
    );
}

/// What the client stack below the client layer applies to each request: the budget the
/// client layer stamped, restated in `target` (in ingress and egress alike).
pub(crate) fn on_request<B>(
    profile: std::sync::Arc<Profile>,
    target: Carrier,
) -> impl Fn(http::Request<B>) -> http::Request<B> + Clone {
    move |mut req| {
        restate(req.headers_mut(), &profile, target, || {
            SystemClock.now_unix_ms()
        });
        req
    }
}

pub(crate) fn encode(
    carrier: Carrier,
    forward: Duration,
    now_unix_ms: impl Fn() -> u64,
) -> http::HeaderValue {
    match carrier {
        Carrier::GrpcTimeout => grpc_timeout::encode(forward),
        Carrier::EpochMs | Carrier::Queue => epoch::encode(forward, now_unix_ms()),
        Carrier::Connect => millis::encode_connect(forward),
        _ => millis::encode(forward),
    }
    .to_header_value()
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
    fn the_stamped_budget_is_restated_in_the_chosen_carrier_never_larger() {
        let profile = Profile::default();
        let stamped = || headers(&[("x-request-timeout-ms", "294")]);
        let clock = || 1_000_000;

        let mut h = stamped();
        restate(&mut h, &profile, Carrier::GrpcTimeout, clock);
        assert_eq!(h.len(), 1);
        // 294 ms in the finest unit that fits gRPC's 8 digits.
        assert_eq!(h["grpc-timeout"], "294000u");

        let mut h = stamped();
        restate(&mut h, &profile, Carrier::EpochMs, clock);
        assert_eq!(h["x-request-deadline"], "1000294");

        let mut h = stamped();
        restate(&mut h, &profile, Carrier::Envoy, clock);
        assert_eq!(h["x-envoy-expected-rq-timeout-ms"], "294");
        assert!(!h.contains_key("x-request-timeout-ms"));

        let mut h = stamped();
        restate(&mut h, &profile, Carrier::RelativeMs, || unreachable!());
        assert_eq!(h["x-request-timeout-ms"], "294");
    }

    #[test]
    fn no_stamp_for_an_untrusted_destination_means_nothing_is_written() {
        let mut h = HeaderMap::new();
        restate(&mut h, &Profile::default(), Carrier::GrpcTimeout, || 0);
        assert!(h.is_empty());
    }
}
