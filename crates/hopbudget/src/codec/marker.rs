//! The answer markers, both ways: `x-deadline-outcome` on every answer a hopbudget layer makes
//! itself, and on a refusal `x-deadline-required-ms` and `x-deadline-remaining-ms` (rules
//! [C3](crate::contract#c3), [C4](crate::contract#c4), [C17](crate::contract#c17)).
//!
//! A client reads the marker before the status code, so a refusal (which shares 503 or
//! DEADLINE_EXCEEDED with other causes) and a proxy's own 504 are told apart from hopbudget's
//! answers. The same three fields travel as HTTP headers, gRPC metadata and NATS message
//! headers; each map type implements [`Fields`] once, and everything that reads or writes a
//! marker goes through this module, so the names and the spelling of the numbers live here
//! alone.
//!
//! # Examples
//!
//! A refusal as a hopbudget server spells it, and read back:
//!
//! ```
//! use std::time::Duration;
//! use hopbudget::codec::marker;
//!
//! let mut headers = http::HeaderMap::new();
//! headers.insert(marker::OUTCOME, "refused".parse().unwrap());
//! headers.insert(marker::REQUIRED_MS, "200".parse().unwrap());
//! headers.insert(marker::REMAINING_MS, " 120".parse().unwrap());
//!
//! let refused = marker::refusal(&headers).expect("a refusal");
//! assert_eq!(refused.required(), Duration::from_millis(200));
//! assert_eq!(refused.remaining(), Duration::from_millis(120));
//! assert_eq!(marker::outcome(&headers), Some(hopbudget::Outcome::Refused));
//! assert_eq!(marker::outcome(&http::HeaderMap::new()), None);
//! ```

use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};

use super::{Encoded, millis};
use crate::{error::Refused, outcome::Outcome};

/// Header (or gRPC metadata key, or NATS header) naming how the hop ended, on every answer a
/// hopbudget layer makes itself: `refused`, `expired`, `cancelled` or `malformed`.
///
/// See the [module example](self#examples).
pub const OUTCOME: &str = crate::status::OUTCOME_METADATA;
/// On a refusal: the budget the refuser needed, in milliseconds.
///
/// See the [module example](self#examples).
pub const REQUIRED_MS: &str = crate::status::REQUIRED_MS_HEADER;
/// On a refusal: the budget the refuser was given, in milliseconds.
///
/// See the [module example](self#examples).
pub const REMAINING_MS: &str = crate::status::REMAINING_MS_HEADER;

// Names made once: a lookup by `&str` parses and validates the name on every call, and these
// are read on every answer of every hop.
pub(crate) static OUTCOME_HEADER: HeaderName = HeaderName::from_static(OUTCOME);
pub(crate) static REQUIRED_HEADER: HeaderName = HeaderName::from_static(REQUIRED_MS);
pub(crate) static REMAINING_HEADER: HeaderName = HeaderName::from_static(REMAINING_MS);

/// The three marker fields.
///
/// See the [example on `Field::name`](Field::name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// [`OUTCOME`].
    Outcome,
    /// [`REQUIRED_MS`].
    RequiredMs,
    /// [`REMAINING_MS`].
    RemainingMs,
}

impl Field {
    /// The field's name on the wire.
    ///
    /// ```
    /// use hopbudget::codec::marker::Field;
    /// assert_eq!(Field::RequiredMs.name(), "x-deadline-required-ms");
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            Field::Outcome => OUTCOME,
            Field::RequiredMs => REQUIRED_MS,
            Field::RemainingMs => REMAINING_MS,
        }
    }

    fn header(self) -> &'static HeaderName {
        match self {
            Field::Outcome => &OUTCOME_HEADER,
            Field::RequiredMs => &REQUIRED_HEADER,
            Field::RemainingMs => &REMAINING_HEADER,
        }
    }
}

/// A map an answer's marker fields are read from: HTTP headers or trailers here, gRPC
/// metadata and NATS headers in their integrations.
///
/// See the [module example](self#examples).
pub trait Fields {
    /// The raw value of `field`, if the answer carries it.
    ///
    /// ```
    /// use hopbudget::codec::marker::{Field, Fields};
    ///
    /// let mut headers = http::HeaderMap::new();
    /// headers.insert("x-deadline-outcome", "expired".parse().unwrap());
    /// assert_eq!(headers.field(Field::Outcome), Some(&b"expired"[..]));
    /// assert_eq!(headers.field(Field::RequiredMs), None);
    /// ```
    fn field(&self, field: Field) -> Option<&[u8]>;
}

impl Fields for HeaderMap {
    #[inline]
    fn field(&self, field: Field) -> Option<&[u8]> {
        small_map_get(self, field.header()).map(HeaderValue::as_bytes)
    }
}

/// A header by name: a short scan of the few headers an answer has beats hashing the name.
#[inline]
pub(crate) fn small_map_get<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
) -> Option<&'a HeaderValue> {
    const SCAN_BELOW: usize = 8;
    if headers.len() <= SCAN_BELOW {
        headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    } else {
        headers.get(name)
    }
}

/// What an answer's [`OUTCOME`] marker names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Marker {
    /// `refused`, `expired` or `cancelled`.
    Stated(Outcome),
    /// `malformed`: the callee could not read the deadline header it was sent.
    Malformed,
}

impl Marker {
    /// The marker spelled by `value`, if it is one of ours.
    pub(crate) fn parse(value: &[u8]) -> Option<Self> {
        Some(match value {
            b"refused" => Marker::Stated(Outcome::Refused),
            b"expired" => Marker::Stated(Outcome::Expired),
            b"cancelled" => Marker::Stated(Outcome::Cancelled),
            b"malformed" => Marker::Malformed,
            _ => return None,
        })
    }

    /// The marker's spelling on the wire.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Marker::Stated(outcome) => outcome.as_str(),
            Marker::Malformed => "malformed",
        }
    }
}

/// The marker an answer carries.
#[inline]
pub(crate) fn read<F: Fields + ?Sized>(fields: &F) -> Option<Marker> {
    Marker::parse(fields.field(Field::Outcome)?)
}

/// The outcome an answer's marker states: `None` without a marker, or for `malformed` (an
/// error, but not a deadline outcome).
///
/// See the [module example](self#examples).
pub fn outcome<F: Fields + ?Sized>(fields: &F) -> Option<Outcome> {
    match read(fields)? {
        Marker::Stated(outcome) => Some(outcome),
        Marker::Malformed => None,
    }
}

/// A millisecond field, as a refuser wrote it.
fn ms<F: Fields + ?Sized>(fields: &F, field: Field) -> Option<Duration> {
    millis::decode(fields.field(field)?).ok()
}

/// The budget a refuser needed, when the answer says.
#[inline]
pub(crate) fn required<F: Fields + ?Sized>(fields: &F) -> Option<Duration> {
    ms(fields, Field::RequiredMs)
}

/// The refusal an answer states: its required budget (without it there is no refusal to
/// act on), and the remaining budget it was given (zero when it does not say).
///
/// See the [module example](self#examples).
pub fn refusal<F: Fields + ?Sized>(fields: &F) -> Option<Refused> {
    Some(Refused::new(
        required(fields)?,
        ms(fields, Field::RemainingMs).unwrap_or_default(),
    ))
}

/// Every millisecond field is spelled by this encoder (relative, rounded down).
#[inline]
pub(crate) fn encode_ms(value: Duration) -> Encoded {
    millis::encode(value)
}

/// Mark an HTTP answer (headers or trailers) with `marker`.
#[inline]
pub(crate) fn mark(headers: &mut HeaderMap, marker: Marker) {
    headers.insert(
        OUTCOME_HEADER.clone(),
        HeaderValue::from_static(marker.as_str()),
    );
}

/// Mark an HTTP answer with `marker` unless it already carries one (a handler's own).
#[inline]
pub(crate) fn mark_unless_marked(headers: &mut HeaderMap, marker: Marker) {
    headers
        .entry(&OUTCOME_HEADER)
        .or_insert(HeaderValue::from_static(marker.as_str()));
}

/// Mark an HTTP answer as the refusal `refused`: the outcome, the required and the remaining
/// budget.
pub(crate) fn mark_refusal(headers: &mut HeaderMap, refused: &Refused) {
    mark(headers, Marker::Stated(Outcome::Refused));
    headers.insert(
        REQUIRED_HEADER.clone(),
        encode_ms(refused.required()).to_header_value(),
    );
    headers.insert(
        REMAINING_HEADER.clone(),
        encode_ms(refused.remaining()).to_header_value(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_marker_round_trips() {
        for marker in [
            Marker::Stated(Outcome::Refused),
            Marker::Stated(Outcome::Expired),
            Marker::Stated(Outcome::Cancelled),
            Marker::Malformed,
        ] {
            let mut h = HeaderMap::new();
            mark(&mut h, marker);
            assert_eq!(read(&h), Some(marker));
        }
        assert_eq!(
            Marker::parse(b"completed"),
            None,
            "completion is never marked"
        );
        assert_eq!(Marker::parse(b"Expired"), None, "markers are lowercase");
    }

    #[test]
    fn a_refusal_round_trips_and_needs_its_required_budget() {
        let mut h = HeaderMap::new();
        let refused = Refused::new(Duration::from_micros(200_900), Duration::from_millis(120));
        mark_refusal(&mut h, &refused);
        assert_eq!(h[OUTCOME], "refused");
        let back = refusal(&h).unwrap();
        assert_eq!(back.required(), Duration::from_millis(200), "rounded down");
        assert_eq!(back.remaining(), Duration::from_millis(120));

        h.remove(REMAINING_MS);
        assert_eq!(refusal(&h).unwrap().remaining(), Duration::ZERO);
        h.remove(REQUIRED_MS);
        assert_eq!(refusal(&h), None);
        h.insert(REQUIRED_MS, "soon".parse().unwrap());
        assert_eq!(
            refusal(&h),
            None,
            "a value that does not parse is not a requirement"
        );
    }

    #[test]
    fn a_long_header_map_is_read_by_name() {
        let mut h = HeaderMap::new();
        for i in 0..12 {
            h.insert(
                HeaderName::from_bytes(format!("x-other-{i}").as_bytes()).unwrap(),
                "1".parse().unwrap(),
            );
        }
        mark(&mut h, Marker::Stated(Outcome::Expired));
        assert_eq!(outcome(&h), Some(Outcome::Expired));
    }
}
