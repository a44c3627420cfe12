//! Reading the inbound budget from every carrier a profile enables.
//!
//! Several carriers on one request (a gRPC call behind Envoy, say) are all honoured: the
//! tightest wins, and the result is clamped to the profile maximum (rule [C9](crate::contract#c9): an inbound budget
//! is untrusted input). A present but malformed carrier is an error, never "no deadline".

use std::fmt;
use std::time::Duration;

use http::{HeaderMap, HeaderName};

use super::{Carrier, InvalidValue};
use crate::clock::WallClock;

/// The carriers a server reads, each with its header name, resolved once from a profile.
///
/// # Examples
///
/// ```
/// use http::HeaderName;
/// use hopbudget::codec::{Carrier, InboundCarriers};
///
/// let defaults = InboundCarriers::new([Carrier::GrpcTimeout, Carrier::RelativeMs]);
/// let names: Vec<_> = defaults.iter().map(|(_, name)| name.as_str()).collect();
/// assert_eq!(names, ["grpc-timeout", "x-request-timeout-ms"]);
///
/// // A profile that renames the HTTP header.
/// let renamed = InboundCarriers::with_names([(Carrier::RelativeMs, HeaderName::from_static("x-budget-ms"))]);
/// assert_eq!(renamed.iter().next(), Some((Carrier::RelativeMs, &HeaderName::from_static("x-budget-ms"))));
/// ```
#[derive(Clone, Debug)]
pub struct InboundCarriers {
    carriers: Vec<(Carrier, HeaderName)>,
    /// Bit `n` is set when a carrier's name is `n` bytes long (bit 63: 63 or longer), so that
    /// a walk over a request's headers skips most names with one test instead of comparing
    /// them with every carrier's.
    lengths: u64,
}

impl InboundCarriers {
    /// Read these carriers under their default header names.
    ///
    /// See the [example](Self#examples).
    pub fn new(carriers: impl IntoIterator<Item = Carrier>) -> Self {
        Self::with_names(
            carriers
                .into_iter()
                .map(|c| (c, HeaderName::from_static(c.default_header()))),
        )
    }

    /// Read these carriers under the given header names.
    ///
    /// See the [example](Self#examples).
    pub fn with_names(carriers: impl IntoIterator<Item = (Carrier, HeaderName)>) -> Self {
        let carriers: Vec<_> = carriers.into_iter().collect();
        let lengths = carriers
            .iter()
            .fold(0, |mask, (_, name)| mask | length_bit(name.as_str()));
        Self { carriers, lengths }
    }

    /// Whether some carrier's name is as long as `name`: if not, `name` is none of them.
    #[inline]
    fn may_name_a_carrier(&self, name: &str) -> bool {
        self.lengths & length_bit(name) != 0
    }

    /// The carriers and their header names, in reading order.
    ///
    /// See the [example](Self#examples).
    pub fn iter(&self) -> impl Iterator<Item = (Carrier, &HeaderName)> {
        self.carriers.iter().map(|(c, n)| (*c, n))
    }
}

/// A budget read off the wire: what [`read_inbound`] returns.
///
/// See the [example](read_inbound#examples).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inbound {
    /// The carrier whose value won (the tightest).
    pub carrier: Carrier,
    /// The budget, after clamping to the profile maximum.
    pub budget: Duration,
    /// Whether the header asked for more than the maximum and was clamped.
    pub clamped: bool,
}

/// A deadline header that is present but cannot be read. Answered with 400 /
/// INVALID_ARGUMENT (rule [C9](crate::contract#c9)); its `Display` names the header and the reason.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use http::{HeaderMap, HeaderName};
/// use hopbudget::clock::SystemClock;
/// use hopbudget::codec::{Carrier, InboundCarriers, InvalidValue, MalformedHeader, read_inbound};
///
/// let mut headers = HeaderMap::new();
/// headers.insert("x-request-timeout-ms", "soon".parse().unwrap());
/// let carriers = InboundCarriers::new([Carrier::RelativeMs]);
/// let err = read_inbound(&headers, &carriers, Duration::from_secs(30), &SystemClock).unwrap_err();
/// assert_eq!(err.header(), "x-request-timeout-ms");
/// assert_eq!(err.reason(), InvalidValue::NotADigit);
/// assert_eq!(
///     err,
///     MalformedHeader::new(HeaderName::from_static("x-request-timeout-ms"), InvalidValue::NotADigit)
/// );
/// assert_eq!(err.to_string(), "malformed deadline header `x-request-timeout-ms`: not a decimal number");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MalformedHeader {
    header: HeaderName,
    reason: InvalidValue,
}

impl MalformedHeader {
    /// A malformed-header error for `header`.
    ///
    /// See the [example](Self#examples).
    pub fn new(header: HeaderName, reason: InvalidValue) -> Self {
        Self { header, reason }
    }

    /// The header's name.
    ///
    /// See the [example](Self#examples).
    pub fn header(&self) -> &HeaderName {
        &self.header
    }

    /// Why its value was rejected.
    ///
    /// See the [example](Self#examples).
    pub fn reason(&self) -> InvalidValue {
        self.reason
    }
}

impl fmt::Display for MalformedHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "malformed deadline header `{}`: {}",
            self.header, self.reason
        )
    }
}

impl std::error::Error for MalformedHeader {}

/// Up to this many header values, [`read_inbound`] scans the map once instead of looking up
/// each carrier.
const SCAN_BELOW: usize = 8;

/// The bit of [`InboundCarriers::lengths`] for a name of this length.
#[inline]
fn length_bit(name: &str) -> u64 {
    1 << name.len().min(63)
}

/// Read the tightest budget among the enabled carriers present in `headers`, clamped to `max`.
///
/// Returns `Ok(None)` when no enabled carrier is present (the caller then falls back to the
/// profile's edge total, rule [C8](crate::contract#c8)). The wall clock is read at most once, and only if an absolute
/// carrier is present.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use http::HeaderMap;
/// use hopbudget::clock::SystemClock;
/// use hopbudget::codec::{Carrier, InboundCarriers, read_inbound};
///
/// let carriers = InboundCarriers::new([Carrier::GrpcTimeout, Carrier::RelativeMs]);
/// let mut headers = HeaderMap::new();
/// headers.insert("grpc-timeout", "300m".parse().unwrap());
/// headers.insert("x-request-timeout-ms", "250".parse().unwrap());
/// let inbound = read_inbound(&headers, &carriers, Duration::from_secs(30), &SystemClock)
///     .unwrap()
///     .unwrap();
/// assert_eq!(inbound.carrier, Carrier::RelativeMs);
/// assert_eq!(inbound.budget, Duration::from_millis(250));
/// ```
pub fn read_inbound(
    headers: &HeaderMap,
    carriers: &InboundCarriers,
    max: Duration,
    clock: &dyn WallClock,
) -> Result<Option<Inbound>, MalformedHeader> {
    let mut best: Option<(Carrier, Duration)> = None;
    let mut wall_now: Option<u64> = None;
    let mut consider = |carrier: Carrier, name: &HeaderName, value: &http::HeaderValue| {
        let budget = carrier
            .decode(value.as_bytes(), || {
                *wall_now.get_or_insert_with(|| clock.now_unix_ms())
            })
            .map_err(|reason| MalformedHeader::new(name.clone(), reason))?;
        if best.is_none_or(|(_, b)| budget < b) {
            best = Some((carrier, budget));
        }
        Ok(())
    };
    if headers.len() <= SCAN_BELOW {
        // A small map is cheaper to walk once, comparing names, than to hash every carrier's
        // name for a lookup (this runs on every request of every layer).
        for (name, value) in headers {
            // Compared as text: `HeaderName`'s own equality first matches its representation
            // (standard, lower-case custom, ...) for every carrier, and a name's text is read
            // once here for the length test anyway.
            let text = name.as_str();
            if !carriers.may_name_a_carrier(text) {
                continue;
            }
            for (carrier, wanted) in carriers.iter() {
                if wanted.as_str() == text {
                    consider(carrier, wanted, value)?;
                }
            }
        }
    } else {
        for (carrier, name) in carriers.iter() {
            for value in headers.get_all(name) {
                consider(carrier, name, value)?;
            }
        }
    }
    Ok(best.map(|(carrier, budget)| Inbound {
        carrier,
        budget: budget.min(max),
        clamped: budget > max,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{SkewedClock, SystemClock};

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    const MAX: Duration = Duration::from_secs(30);

    #[test]
    fn tightest_carrier_wins_and_max_clamps() {
        let all = InboundCarriers::new([
            Carrier::GrpcTimeout,
            Carrier::RelativeMs,
            Carrier::Connect,
            Carrier::Envoy,
        ]);
        let h = headers(&[
            ("grpc-timeout", "2S"),
            ("x-envoy-expected-rq-timeout-ms", "150"),
            ("connect-timeout-ms", "900"),
        ]);
        let got = read_inbound(&h, &all, MAX, &SystemClock).unwrap().unwrap();
        assert_eq!(
            (got.carrier, got.budget),
            (Carrier::Envoy, Duration::from_millis(150))
        );

        let h = headers(&[("x-request-timeout-ms", "99999999999")]);
        let got = read_inbound(&h, &all, MAX, &SystemClock).unwrap().unwrap();
        assert_eq!(got.budget, MAX);
        assert!(got.clamped);
    }

    #[test]
    fn small_and_large_header_maps_read_the_same() {
        let all = InboundCarriers::new([Carrier::GrpcTimeout, Carrier::RelativeMs]);
        let mut h = headers(&[("grpc-timeout", "2S"), ("x-request-timeout-ms", "150")]);
        let small = read_inbound(&h, &all, MAX, &SystemClock).unwrap();
        for i in 0..SCAN_BELOW {
            h.append(
                HeaderName::from_bytes(format!("x-filler-{i}").as_bytes()).unwrap(),
                "1".parse().unwrap(),
            );
        }
        h.append("x-request-timeout-ms", "90".parse().unwrap());
        assert!(h.len() > SCAN_BELOW);
        let large = read_inbound(&h, &all, MAX, &SystemClock).unwrap().unwrap();
        assert_eq!(small.unwrap().budget, Duration::from_millis(150));
        assert_eq!(
            (large.carrier, large.budget),
            (Carrier::RelativeMs, Duration::from_millis(90))
        );
        h.append("grpc-timeout", "1x".parse().unwrap());
        assert!(read_inbound(&h, &all, MAX, &SystemClock).is_err());
    }

    #[test]
    fn carrier_names_of_any_length_are_found_by_the_small_map_walk() {
        let long = "x-".to_owned() + &"a".repeat(80);
        let carriers = InboundCarriers::with_names([
            (
                Carrier::RelativeMs,
                HeaderName::from_bytes(long.as_bytes()).unwrap(),
            ),
            (Carrier::Envoy, HeaderName::from_static("x-budget-ms")),
        ]);
        let long = leak(&long);
        // A name as long as a carrier's but not one is skipped by content, not by length.
        let cases = [
            (
                vec![
                    (long, "300"),
                    ("x-budget-xx", "nope"),
                    ("x-budget-ms", "200"),
                ],
                Carrier::Envoy,
                200,
            ),
            (
                vec![(long, "100"), ("host", "example")],
                Carrier::RelativeMs,
                100,
            ),
        ];
        for (pairs, carrier, ms) in cases {
            let got = read_inbound(&headers(&pairs), &carriers, MAX, &SystemClock)
                .unwrap()
                .unwrap();
            assert_eq!(
                (got.carrier, got.budget),
                (carrier, Duration::from_millis(ms)),
                "{pairs:?}"
            );
        }
    }

    fn leak(s: &str) -> &'static str {
        Box::leak(s.to_owned().into_boxed_str())
    }

    #[test]
    fn absent_is_none_and_disabled_carriers_are_ignored() {
        let only_grpc = InboundCarriers::new([Carrier::GrpcTimeout]);
        let h = headers(&[("x-request-timeout-ms", "100")]);
        assert_eq!(read_inbound(&h, &only_grpc, MAX, &SystemClock), Ok(None));
    }

    #[test]
    fn malformed_names_header_and_reason() {
        let c = InboundCarriers::new([Carrier::GrpcTimeout]);
        let h = headers(&[("grpc-timeout", "10s")]);
        let err = read_inbound(&h, &c, MAX, &SystemClock).unwrap_err();
        assert_eq!(err.header(), "grpc-timeout");
        let text = err.to_string();
        assert!(
            text.contains("grpc-timeout") && text.contains("unknown unit 's'"),
            "{text}"
        );
    }

    #[test]
    fn s3_skew_shrinks_epoch_budgets_but_not_relative_ones() {
        // S3: the callee's wall clock is 300 ms ahead of the caller's.
        let caller = SystemClock;
        let callee = SkewedClock::new(300);
        let budget = Duration::from_millis(400);

        let epoch = crate::codec::epoch::encode(budget, caller.now_unix_ms());
        let relative = crate::codec::millis::encode(budget);
        let mut h = HeaderMap::new();
        h.insert("x-request-deadline", epoch.to_header_value());
        h.insert("x-request-timeout-ms", relative.to_header_value());

        let epoch_seen = read_inbound(&h, &InboundCarriers::new([Carrier::EpochMs]), MAX, &callee)
            .unwrap()
            .unwrap()
            .budget;
        let relative_seen = read_inbound(
            &h,
            &InboundCarriers::new([Carrier::RelativeMs]),
            MAX,
            &callee,
        )
        .unwrap()
        .unwrap()
        .budget;
        assert_eq!(relative_seen, budget, "relative encoding is immune to skew");
        // 400 ms minus 300 ms of skew, minus at most a few ms of real time between the two reads.
        assert!(
            epoch_seen <= Duration::from_millis(100) && epoch_seen >= Duration::from_millis(90),
            "epoch encoding loses the skew: saw {epoch_seen:?}"
        );
    }
}
