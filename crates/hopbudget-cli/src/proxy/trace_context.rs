//! Trace context started at the ingress (rule C26, issue #45 item 1).
//!
//! The egress finds the inbound request an outbound call belongs to by the trace context the
//! service forwards. A gateway's client usually sends none: then the service's OpenTelemetry
//! SDK starts a trace of its own that the sidecar has never seen, and every outbound call of
//! that request would match nothing. So a request that arrives without a valid `traceparent`
//! (and without B3 headers, which a Zipkin fleet forwards instead) gets one here, before the
//! server layer reads it: a new trace id, sampled as the profile's `sidecar.sample_ratio`
//! says. Unsampled requests get ids too, so that their calls are still matched. The same
//! holds for `--request-id-header`: a request without one gets a fresh id.
//!
//! A caller's valid `traceparent` passes unchanged here (its sampled flag is the caller's
//! decision).

use std::cell::Cell;
use std::hash::{BuildHasher, Hash, Hasher};

use http::{HeaderMap, HeaderName, HeaderValue};

/// W3C Trace Context's header.
pub(crate) const TRACEPARENT: &str = "traceparent";
/// Zipkin's single B3 header and the first of its multi-header form.
const B3: &str = "b3";
const X_B3_TRACE_ID: &str = "x-b3-traceid";

/// What the ingress adds to a request that arrives without trace context or request id.
#[derive(Debug, Clone)]
pub(crate) struct Starter {
    /// Requests started as sampled, out of `u64::MAX` (the profile's ratio, scaled once).
    sampled_below: u64,
    always_sampled: bool,
    request_id: Option<HeaderName>,
}

/// What [`Starter::ensure`] added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Started {
    /// A `traceparent` with a new trace id.
    pub(crate) trace: bool,
    /// A request id under `--request-id-header`.
    pub(crate) request_id: bool,
}

impl Starter {
    pub(crate) fn new(sample_ratio: f64, request_id: Option<HeaderName>) -> Self {
        let ratio = sample_ratio.clamp(0.0, 1.0);
        Self {
            // The float-to-int cast saturates; a ratio of 1 is handled apart, exactly.
            sampled_below: (ratio * u64::MAX as f64) as u64,
            always_sampled: ratio >= 1.0,
            request_id,
        }
    }

    /// Give the request trace context and a request id when it has none.
    pub(crate) fn ensure(&self, headers: &mut HeaderMap) -> Started {
        let mut started = Started::default();
        if !has_trace_context(headers) {
            let trace_id = random_u128();
            let span_id = random_u64() | 1; // never the all-zero invalid id
            let sampled = self.always_sampled || random_u64() < self.sampled_below;
            headers.insert(TRACEPARENT, traceparent(trace_id, span_id, sampled));
            started.trace = true;
        }
        if let Some(name) = &self.request_id {
            if headers.get(name).is_none_or(|v| v.is_empty()) {
                headers.insert(name.clone(), request_id(random_u128()));
                started.request_id = true;
            }
        }
        started
    }
}

/// Whether the request carries trace context the egress can match on: a valid
/// `traceparent`, or a B3 trace id.
fn has_trace_context(headers: &HeaderMap) -> bool {
    if headers
        .get(TRACEPARENT)
        .and_then(|v| v.to_str().ok())
        .and_then(traceparent_trace_id)
        .is_some()
    {
        return true;
    }
    b3_trace_id(headers).is_some()
}

/// `00-<trace id>-<span id>-<flags>`, lowercase hex as W3C Trace Context requires.
fn traceparent(trace_id: u128, span_id: u64, sampled: bool) -> HeaderValue {
    let value = format!(
        "00-{trace_id:032x}-{span_id:016x}-{:02x}",
        u8::from(sampled)
    );
    // Hex digits and dashes are always a valid header value.
    HeaderValue::from_str(&value).unwrap_or(HeaderValue::from_static(""))
}

fn request_id(id: u128) -> HeaderValue {
    HeaderValue::from_str(&format!("{id:032x}")).unwrap_or(HeaderValue::from_static(""))
}

/// The trace id of a `traceparent` value (`00-<32 hex>-<16 hex>-<2 hex>`), or `None` for a
/// value that is not one: version `ff`, an all-zero id, wrong lengths or characters. Later
/// versions may add fields after the flags (W3C Trace Context, "versioning").
pub(crate) fn traceparent_trace_id(value: &str) -> Option<&str> {
    let mut parts = value.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let valid = hex(version, 2)
        && version != "ff"
        && (version != "00" || parts.next().is_none())
        && hex(trace, 32)
        && trace.bytes().any(|b| b != b'0')
        && hex(span, 16)
        && span.bytes().any(|b| b != b'0')
        && hex(flags, 2);
    valid.then_some(trace)
}

/// The B3 trace id a request carries (`b3: <trace>-<span>[-<sampled>[-<parent>]]`, or
/// `x-b3-traceid`), 16 or 32 hex digits; a 64-bit id is read as the low half of a 128-bit one,
/// as OpenTelemetry's B3 propagator pads it, so that it matches the same trace in
/// `traceparent`.
pub(crate) fn b3_trace_id(headers: &HeaderMap) -> Option<String> {
    let single = headers
        .get(B3)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().split('-').next());
    let id = single
        .or_else(|| headers.get(X_B3_TRACE_ID).and_then(|v| v.to_str().ok()))?
        .trim();
    let valid = (hex(id, 16) || hex(id, 32)) && id.bytes().any(|b| b != b'0');
    valid.then(|| format!("{:0>32}", id.to_ascii_lowercase()))
}

fn hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

// Ids need to be unique, not secret: splitmix64 per thread, seeded from the standard
// library's per-process random hash keys (drawn from the operating system), the thread and
// the time. No lock and no system call per request.
thread_local! {
    static STATE: Cell<u64> = Cell::new(seed());
}

fn seed() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    );
    std::thread::current().id().hash(&mut hasher);
    hasher.finish()
}

fn random_u64() -> u64 {
    STATE.with(|state| {
        let next = state.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        state.set(next);
        let mut z = next;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

fn random_u128() -> u128 {
    // Never all zero: the low half is forced odd.
    (u128::from(random_u64()) << 64) | u128::from(random_u64() | 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T1: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_request_without_trace_context_gets_a_valid_new_one() {
        let starter = Starter::new(1.0, None);
        let mut h = HeaderMap::new();
        assert!(starter.ensure(&mut h).trace);
        let value = h[TRACEPARENT].to_str().unwrap().to_owned();
        assert!(traceparent_trace_id(&value).is_some(), "{value}");
        assert!(value.ends_with("-01"), "sampled by default: {value}");
        // Each request its own trace.
        let mut other = HeaderMap::new();
        starter.ensure(&mut other);
        assert_ne!(h[TRACEPARENT], other[TRACEPARENT]);
    }

    #[test]
    fn a_callers_valid_traceparent_or_b3_passes_unchanged() {
        let starter = Starter::new(0.0, None);
        let mut h = HeaderMap::new();
        h.insert(TRACEPARENT, T1.parse().unwrap());
        assert_eq!(starter.ensure(&mut h), Started::default());
        assert_eq!(h[TRACEPARENT], T1);

        let mut b3 = HeaderMap::new();
        b3.insert(
            B3,
            "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1"
                .parse()
                .unwrap(),
        );
        assert!(!starter.ensure(&mut b3).trace);
        assert!(!b3.contains_key(TRACEPARENT));
    }

    #[test]
    fn an_invalid_traceparent_is_replaced_and_the_ratio_decides_sampling() {
        let starter = Starter::new(0.0, None);
        let mut h = HeaderMap::new();
        h.insert(
            TRACEPARENT,
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01"
                .parse()
                .unwrap(),
        );
        assert!(starter.ensure(&mut h).trace);
        assert!(
            h[TRACEPARENT].to_str().unwrap().ends_with("-00"),
            "ratio 0: unsampled"
        );
        let half = Starter::new(0.5, None);
        let sampled = (0..2000)
            .filter(|_| {
                let mut h = HeaderMap::new();
                half.ensure(&mut h);
                h[TRACEPARENT].to_str().unwrap().ends_with("-01")
            })
            .count();
        assert!(
            (800..1200).contains(&sampled),
            "{sampled} of 2000 at ratio 0.5"
        );
    }

    #[test]
    fn a_missing_request_id_is_set_and_a_present_one_kept() {
        let name = HeaderName::from_static("x-request-id");
        let starter = Starter::new(1.0, Some(name.clone()));
        let mut h = HeaderMap::new();
        assert!(starter.ensure(&mut h).request_id);
        assert_eq!(h[&name].len(), 32);
        let mut kept = HeaderMap::new();
        kept.insert(name.clone(), "abc".parse().unwrap());
        assert!(!starter.ensure(&mut kept).request_id);
        assert_eq!(kept[&name], "abc");
    }

    #[test]
    fn b3_ids_are_read_in_both_forms_and_padded_to_128_bits() {
        let mut h = HeaderMap::new();
        h.insert(X_B3_TRACE_ID, "463AC35C9F6413AD".parse().unwrap());
        assert_eq!(
            b3_trace_id(&h).as_deref(),
            Some("0000000000000000463ac35c9f6413ad")
        );
        let mut single = HeaderMap::new();
        single.insert(B3, "0".parse().unwrap());
        assert_eq!(
            b3_trace_id(&single),
            None,
            "a sampling decision alone is no id"
        );
    }

    #[test]
    fn malformed_traceparents_are_not_trace_context() {
        assert_eq!(
            traceparent_trace_id(T1),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert_eq!(traceparent_trace_id(bad), None, "{bad}");
        }
        // A later version may carry more fields.
        assert!(
            traceparent_trace_id("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x")
                .is_some()
        );
    }
}
