//! Wire codecs: one file per carrier in the contract's table (`docs/contract.md`, "On the
//! wire"), each turning header bytes into a relative budget and back.
//!
//! Codecs are pure functions over bytes. They never panic, enforce the carrier's length limits
//! in both directions, round *down* when encoding (rule [C2](crate::contract#c2): the downstream must never be told it
//! has more time than the caller had), and report a typed [`InvalidValue`] that says what was
//! wrong. [`read_inbound`] combines them: it reads every carrier a profile enables and lets the
//! tightest win (rule [C9](crate::contract#c9)).
//!
//! # Example
//!
//! The header names, one constant per carrier, and a budget read from them:
//!
//! ```
//! use std::time::Duration;
//! use http::HeaderMap;
//! use hopbudget::clock::SystemClock;
//! use hopbudget::codec::{self, Carrier, InboundCarriers, read_inbound};
//!
//! assert_eq!(codec::GRPC_TIMEOUT, Carrier::GrpcTimeout.default_header());
//! assert_eq!(codec::REQUEST_TIMEOUT_MS, Carrier::RelativeMs.default_header());
//! assert_eq!(codec::REQUEST_DEADLINE, Carrier::EpochMs.default_header());
//! assert_eq!(codec::CONNECT_TIMEOUT_MS, Carrier::Connect.default_header());
//! assert_eq!(codec::ENVOY_EXPECTED_RQ_TIMEOUT_MS, Carrier::Envoy.default_header());
//! assert_eq!(codec::QUEUE_DEADLINE_EPOCH_MS, Carrier::Queue.default_header());
//! assert_eq!(codec::QUEUE_ORIGIN_BUDGET_MS, "deadline-origin-ms"); // the queue's second header
//!
//! // A gRPC call behind Envoy: both carriers arrive, the tightest wins (C9).
//! let mut headers = HeaderMap::new();
//! headers.insert(codec::GRPC_TIMEOUT, "900m".parse().unwrap());
//! headers.insert(codec::ENVOY_EXPECTED_RQ_TIMEOUT_MS, "250".parse().unwrap());
//! let carriers = InboundCarriers::new([Carrier::GrpcTimeout, Carrier::Envoy]);
//! let inbound = read_inbound(&headers, &carriers, Duration::from_secs(30), &SystemClock)
//!     .unwrap()
//!     .expect("a carrier arrived");
//! assert_eq!((inbound.carrier, inbound.budget), (Carrier::Envoy, Duration::from_millis(250)));
//! ```
//!
//! Guide: *Budgets, carriers and retries*, `docs/guide/concepts.md` in the repository.

pub(crate) mod answer;
mod encoded;
pub mod epoch;
pub mod grpc_timeout;
mod inbound;
pub mod marker;
pub mod millis;

use std::fmt;
use std::time::Duration;

use http::{HeaderMap, HeaderName};

pub use encoded::Encoded;
pub use inbound::{Inbound, InboundCarriers, MalformedHeader, read_inbound};

/// Header carrying the gRPC relative timeout (`100m`, `2S`, ...).
///
/// See the [module example](self#example).
pub const GRPC_TIMEOUT: &str = "grpc-timeout";
/// hopbudget's default HTTP header: the remaining budget in relative milliseconds.
///
/// See the [module example](self#example).
pub const REQUEST_TIMEOUT_MS: &str = "x-request-timeout-ms";
/// HTTP header for trusted clocks: the deadline as absolute Unix epoch milliseconds.
///
/// See the [module example](self#example).
pub const REQUEST_DEADLINE: &str = "x-request-deadline";
/// Connect protocol timeout header: relative milliseconds, at most 10 digits.
///
/// See the [module example](self#example).
pub const CONNECT_TIMEOUT_MS: &str = "connect-timeout-ms";
/// Set by Envoy on requests it forwards: the route timeout in relative milliseconds.
///
/// See the [module example](self#example).
pub const ENVOY_EXPECTED_RQ_TIMEOUT_MS: &str = "x-envoy-expected-rq-timeout-ms";
/// Queue message header: the deadline as absolute Unix epoch milliseconds.
///
/// See the [module example](self#example).
pub const QUEUE_DEADLINE_EPOCH_MS: &str = "deadline-epoch-ms";
/// Queue message header: the budget the producer's request started with, in milliseconds.
///
/// See the [module example](self#example).
pub const QUEUE_ORIGIN_BUDGET_MS: &str = "deadline-origin-ms";

/// The deadline headers every stack knows, whatever a profile reads: what a hop removes
/// before it restates the budget in its own carrier, and what never reaches a third party
/// ([C9](crate::contract#c9), [C19](crate::contract#c19)). The queue's headers travel on
/// messages, not requests.
///
/// ```
/// use hopbudget::codec::{self, Carrier};
///
/// assert!(codec::WELL_KNOWN.contains(&Carrier::GrpcTimeout.default_header()));
/// assert!(!codec::WELL_KNOWN.contains(&codec::QUEUE_DEADLINE_EPOCH_MS));
/// ```
pub const WELL_KNOWN: [&str; 5] = [
    GRPC_TIMEOUT,
    REQUEST_TIMEOUT_MS,
    REQUEST_DEADLINE,
    CONNECT_TIMEOUT_MS,
    ENVOY_EXPECTED_RQ_TIMEOUT_MS,
];

/// Remove every [well-known](WELL_KNOWN) deadline header, and every header `also` picks (a
/// profile's own carrier names), in one walk over the names: most requests carry one deadline
/// header among a handful of others, so this beats one hashed `remove` per name.
///
/// ```
/// use hopbudget::codec;
///
/// let mut headers = http::HeaderMap::new();
/// headers.insert("grpc-timeout", "1H".parse().unwrap());
/// headers.insert("x-budget", "900".parse().unwrap());
/// headers.insert("traceparent", "00-x".parse().unwrap());
/// codec::remove_deadline_headers(&mut headers, |name| name == "x-budget");
/// assert_eq!(headers.len(), 1);
/// ```
pub fn remove_deadline_headers(headers: &mut HeaderMap, also: impl Fn(&HeaderName) -> bool) {
    // Usually zero or one name: the vector allocates only when there is one to remove.
    let found: Vec<HeaderName> = headers
        .keys()
        .filter(|name| WELL_KNOWN.contains(&name.as_str()) || also(name))
        .cloned()
        .collect();
    for name in found {
        headers.remove(name);
    }
}

/// Where a budget came from: one of the wire carriers in the contract's table.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use hopbudget::codec::Carrier;
///
/// let carrier = Carrier::GrpcTimeout;
/// assert_eq!(carrier.name(), "grpc-timeout");
/// assert_eq!(Carrier::RelativeMs.default_header(), "x-request-timeout-ms");
/// assert!(Carrier::EpochMs.is_absolute() && !carrier.is_absolute());
/// // Relative carriers never call the wall clock; absolute ones subtract "now".
/// assert_eq!(carrier.decode(b"250m", || unreachable!()), Ok(Duration::from_millis(250)));
/// assert_eq!(Carrier::EpochMs.decode(b"1000400", || 1_000_000), Ok(Duration::from_millis(400)));
/// // And back, rounded down (C2): the callee is never told more than it has.
/// assert_eq!(carrier.encode(Duration::from_micros(250_999), || unreachable!()).as_str(), "250999u");
/// assert_eq!(Carrier::RelativeMs.encode(Duration::from_micros(250_999), || unreachable!()).as_str(), "250");
/// assert_eq!(Carrier::EpochMs.encode(Duration::from_millis(400), || 1_000_000).as_str(), "1000400");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Carrier {
    /// `grpc-timeout`, relative, value plus unit.
    GrpcTimeout,
    /// Relative milliseconds (`x-request-timeout-ms` by default).
    RelativeMs,
    /// Absolute epoch milliseconds (`x-request-deadline` by default). Trusts clocks.
    EpochMs,
    /// Connect's `connect-timeout-ms`, relative, 1-10 digits.
    Connect,
    /// Envoy's `x-envoy-expected-rq-timeout-ms`, relative, inbound only.
    Envoy,
    /// A queue message's `deadline-epoch-ms`, absolute.
    Queue,
}

impl Carrier {
    /// Every carrier, in the contract's order.
    ///
    /// ```
    /// use hopbudget::codec::Carrier;
    ///
    /// let names: Vec<_> = Carrier::ALL.iter().map(|c| c.name()).collect();
    /// assert_eq!(names, ["grpc-timeout", "relative-ms", "epoch-ms", "connect", "envoy", "queue"]);
    /// ```
    pub const ALL: [Carrier; 6] = [
        Carrier::GrpcTimeout,
        Carrier::RelativeMs,
        Carrier::EpochMs,
        Carrier::Connect,
        Carrier::Envoy,
        Carrier::Queue,
    ];

    /// The carrier's name as it appears in profiles, traces and metric labels.
    ///
    /// See the [example](Self#examples).
    pub const fn name(self) -> &'static str {
        match self {
            Carrier::GrpcTimeout => "grpc-timeout",
            Carrier::RelativeMs => "relative-ms",
            Carrier::EpochMs => "epoch-ms",
            Carrier::Connect => "connect",
            Carrier::Envoy => "envoy",
            Carrier::Queue => "queue",
        }
    }

    /// The header this carrier uses unless a profile renames it.
    ///
    /// See the [example](Self#examples).
    pub const fn default_header(self) -> &'static str {
        match self {
            Carrier::GrpcTimeout => GRPC_TIMEOUT,
            Carrier::RelativeMs => REQUEST_TIMEOUT_MS,
            Carrier::EpochMs => REQUEST_DEADLINE,
            Carrier::Connect => CONNECT_TIMEOUT_MS,
            Carrier::Envoy => ENVOY_EXPECTED_RQ_TIMEOUT_MS,
            Carrier::Queue => QUEUE_DEADLINE_EPOCH_MS,
        }
    }

    /// Whether the value is an absolute instant (and so reads the wall clock once, rule [C1](crate::contract#c1)).
    ///
    /// See the [example](Self#examples).
    pub const fn is_absolute(self) -> bool {
        matches!(self, Carrier::EpochMs | Carrier::Queue)
    }

    /// Decode one header value of this carrier into a relative budget. Absolute carriers
    /// subtract `now_unix_ms`, which the caller reads from its wall clock at most once.
    ///
    /// See the [example](Self#examples).
    pub fn decode(
        self,
        value: &[u8],
        now_unix_ms: impl FnOnce() -> u64,
    ) -> Result<Duration, InvalidValue> {
        match self {
            Carrier::GrpcTimeout => grpc_timeout::decode(value),
            Carrier::RelativeMs | Carrier::Envoy => millis::decode(value),
            Carrier::Connect => millis::decode_connect(value),
            Carrier::EpochMs | Carrier::Queue => epoch::decode(value, now_unix_ms()),
        }
    }

    /// Encode a relative budget in this carrier, rounded down and within the carrier's
    /// limits ([C2](crate::contract#c2)). Absolute carriers add `now_unix_ms`, which the caller
    /// reads from its wall clock at most once; relative ones never call it.
    ///
    /// See the [example](Self#examples).
    #[inline]
    pub fn encode(self, budget: Duration, now_unix_ms: impl FnOnce() -> u64) -> Encoded {
        match self {
            Carrier::GrpcTimeout => grpc_timeout::encode(budget),
            Carrier::RelativeMs | Carrier::Envoy => millis::encode(budget),
            Carrier::Connect => millis::encode_connect(budget),
            Carrier::EpochMs | Carrier::Queue => epoch::encode(budget, now_unix_ms()),
        }
    }
}

impl fmt::Display for Carrier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a header value could not be read as a budget.
///
/// ```
/// use hopbudget::codec::{InvalidValue, grpc_timeout};
///
/// assert_eq!(grpc_timeout::decode(b"10s"), Err(InvalidValue::UnknownUnit(b's')));
/// assert_eq!(grpc_timeout::decode(b"123456789m"), Err(InvalidValue::TooManyDigits { max: 8 }));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidValue {
    /// The value was empty.
    Empty,
    /// A character that is not an ASCII digit where a digit was expected.
    NotADigit,
    /// More digits than the carrier allows.
    TooManyDigits {
        /// The carrier's limit.
        max: u8,
    },
    /// A `grpc-timeout` value without its unit letter.
    MissingUnit,
    /// A `grpc-timeout` unit letter without digits.
    MissingDigits,
    /// A `grpc-timeout` unit that is not one of `H M S m u n` (units are case-sensitive).
    UnknownUnit(u8),
}

impl fmt::Display for InvalidValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InvalidValue::Empty => f.write_str("empty value"),
            InvalidValue::NotADigit => f.write_str("not a decimal number"),
            InvalidValue::TooManyDigits { max } => write!(f, "more than {max} digits"),
            InvalidValue::MissingUnit => {
                f.write_str("missing unit (one of H, M, S, m, u, n; case-sensitive)")
            }
            InvalidValue::MissingDigits => f.write_str("missing digits before the unit"),
            InvalidValue::UnknownUnit(u) if u.is_ascii_graphic() => write!(
                f,
                "unknown unit '{}' (expected one of H, M, S, m, u, n; case-sensitive)",
                *u as char
            ),
            InvalidValue::UnknownUnit(u) => write!(
                f,
                "unknown unit byte 0x{u:02x} (expected one of H, M, S, m, u, n)"
            ),
        }
    }
}

impl std::error::Error for InvalidValue {}

/// Parse at most `max` ASCII digits into a `u64`, saturating instead of overflowing.
#[inline]
pub(crate) fn parse_digits(digits: &[u8], max: u8) -> Result<u64, InvalidValue> {
    if digits.is_empty() {
        return Err(InvalidValue::Empty);
    }
    if digits.len() > max as usize {
        // Report a stray letter before a length problem: it is the more useful message.
        if digits.iter().any(|b| !b.is_ascii_digit()) {
            return Err(InvalidValue::NotADigit);
        }
        return Err(InvalidValue::TooManyDigits { max });
    }
    let mut n: u64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return Err(InvalidValue::NotADigit);
        }
        n = n.saturating_mul(10).saturating_add(u64::from(b - b'0'));
    }
    Ok(n)
}

/// Trim the optional whitespace HTTP allows around a field value.
#[inline]
pub(crate) fn trim(value: &[u8]) -> &[u8] {
    value.trim_ascii()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_digits_limits_and_saturates() {
        assert_eq!(parse_digits(b"0", 8), Ok(0));
        assert_eq!(parse_digits(b"12345678", 8), Ok(12_345_678));
        assert_eq!(
            parse_digits(b"123456789", 8),
            Err(InvalidValue::TooManyDigits { max: 8 })
        );
        assert_eq!(parse_digits(b"12a", 8), Err(InvalidValue::NotADigit));
        assert_eq!(parse_digits(b"", 8), Err(InvalidValue::Empty));
        assert_eq!(parse_digits(b"99999999999999999999", 20), Ok(u64::MAX));
    }

    #[test]
    fn every_carrier_reads_back_what_it_writes_never_more() {
        let now = || 1_700_000_000_000;
        for carrier in Carrier::ALL {
            for budget in [0, 1, 999, 294_999, 86_400_000_000] {
                let budget = Duration::from_micros(budget);
                let encoded = carrier.encode(budget, now);
                let back = carrier.decode(encoded.as_bytes(), now).unwrap();
                assert!(
                    back <= budget,
                    "{carrier}: {budget:?} came back as {back:?}"
                );
                assert!(
                    budget - back < Duration::from_millis(1)
                        || budget > Duration::from_secs(99_999),
                    "{carrier}: {budget:?} lost more than rounding: {back:?}"
                );
            }
        }
    }
}
