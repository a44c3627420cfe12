//! Relative-millisecond carriers: hopbudget's `x-request-timeout-ms`, Envoy's
//! `x-envoy-expected-rq-timeout-ms` and Connect's `connect-timeout-ms`.
//!
//! The value is the remaining budget in whole milliseconds. A leading `-` (a caller that
//! computed a negative remainder) means the budget is already spent: it decodes to zero, which
//! is expired (rule [C9](crate::contract#c9)). Values are read saturating, so a huge header becomes a huge budget that
//! the server then clamps to its profile maximum; it never overflows. Connect allows 1 to 10
//! digits and no sign, and that limit is enforced both ways.
//!
//! See the examples on [`decode`], [`encode`] and their Connect forms.

use std::time::Duration;

use super::{Encoded, InvalidValue, parse_digits, trim};

/// Digit limit for hopbudget's own relative header: anything longer is not a budget.
///
/// See the example on [`decode`].
pub const MAX_DIGITS: u8 = 19;
/// The largest value the relative header can carry: nineteen nines, so that what the encoder
/// writes the decoder reads back (a `u64` can need 20 digits).
///
/// See the example on [`decode`].
pub const MAX_MS: u64 = 9_999_999_999_999_999_999;
/// Connect's digit limit.
///
/// See the example on [`decode_connect`].
pub const CONNECT_MAX_DIGITS: u8 = 10;
/// The largest value Connect can carry: ten nines.
///
/// See the example on [`decode_connect`].
pub const CONNECT_MAX_MS: u64 = 9_999_999_999;

/// Decode relative milliseconds (`x-request-timeout-ms`, Envoy's header).
///
/// ```
/// use std::time::Duration;
/// use hopbudget::codec::millis;
///
/// assert_eq!(millis::decode(b"480"), Ok(Duration::from_millis(480)));
/// assert_eq!(millis::decode(b"-20"), Ok(Duration::ZERO)); // already expired
/// assert!(millis::decode(b"1.5").is_err());
/// // The limits, which the encoder respects too: what it writes, the decoder reads back.
/// assert_eq!(millis::MAX_MS.to_string().len(), usize::from(millis::MAX_DIGITS));
/// assert_eq!(millis::decode(millis::encode(Duration::MAX).as_bytes()), Ok(Duration::from_millis(millis::MAX_MS)));
/// ```
pub fn decode(value: &[u8]) -> Result<Duration, InvalidValue> {
    // What every hop sends: a few digits, nothing around them. Nine digits cannot overflow.
    if let Some(ms) = plain_digits(value) {
        return Ok(Duration::from_millis(ms));
    }
    let value = trim(value);
    match value.split_first() {
        Some((b'-', digits)) => parse_digits(digits, MAX_DIGITS).map(|_| Duration::ZERO),
        _ => parse_digits(value, MAX_DIGITS).map(Duration::from_millis),
    }
}

/// `value` as a number when it is 1 to 9 digits and nothing else.
#[inline]
fn plain_digits(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 9 {
        return None;
    }
    value.iter().try_fold(0u64, |n, &b| {
        b.is_ascii_digit().then(|| n * 10 + u64::from(b - b'0'))
    })
}

/// Decode Connect's `connect-timeout-ms`: 1 to 10 digits, no sign.
///
/// ```
/// use std::time::Duration;
/// use hopbudget::codec::millis;
///
/// assert_eq!(millis::decode_connect(b"250"), Ok(Duration::from_millis(250)));
/// assert!(millis::decode_connect(b"12345678901").is_err()); // more than 10 digits
/// assert_eq!(millis::CONNECT_MAX_MS.to_string().len(), usize::from(millis::CONNECT_MAX_DIGITS));
/// ```
pub fn decode_connect(value: &[u8]) -> Result<Duration, InvalidValue> {
    parse_digits(trim(value), CONNECT_MAX_DIGITS).map(Duration::from_millis)
}

/// Encode a budget as whole milliseconds, rounded down (rule [C2](crate::contract#c2)) and capped at [`MAX_MS`], so
/// any budget, up to `Duration::MAX`, encodes to a value [`decode`] accepts.
///
/// ```
/// use std::time::Duration;
/// use hopbudget::codec::millis;
///
/// assert_eq!(millis::encode(Duration::from_micros(94_999)).as_str(), "94");
/// ```
pub fn encode(budget: Duration) -> Encoded {
    let ms = u64::try_from(budget.as_millis()).map_or(MAX_MS, |ms| ms.min(MAX_MS));
    Encoded::decimal(ms)
}

/// Encode for Connect: rounded down and capped at ten digits.
///
/// ```
/// use std::time::Duration;
/// use hopbudget::codec::millis;
///
/// assert_eq!(millis::encode_connect(Duration::from_secs(u64::MAX)).as_str(), "9999999999");
/// ```
pub fn encode_connect(budget: Duration) -> Encoded {
    encode(budget.min(Duration::from_millis(CONNECT_MAX_MS)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_ms_edge_cases() {
        assert_eq!(decode(b"0"), Ok(Duration::ZERO));
        assert_eq!(decode(b" 25 "), Ok(Duration::from_millis(25)));
        assert_eq!(decode(b"-0"), Ok(Duration::ZERO));
        assert_eq!(decode(b"-"), Err(InvalidValue::Empty));
        assert_eq!(decode(b"+5"), Err(InvalidValue::NotADigit));
        assert_eq!(decode(b"5ms"), Err(InvalidValue::NotADigit));
        assert_eq!(decode(b""), Err(InvalidValue::Empty));
        // Either side of the nine-digit shortcut, and a stray byte inside it.
        assert_eq!(decode(b"999999999"), Ok(Duration::from_millis(999_999_999)));
        assert_eq!(decode(b"0000000001"), Ok(Duration::from_millis(1)));
        assert_eq!(decode(b"12a"), Err(InvalidValue::NotADigit));
        assert_eq!(decode(b"1 2"), Err(InvalidValue::NotADigit));
        assert_eq!(
            decode(b"99999999999"),
            Ok(Duration::from_millis(99_999_999_999))
        );
        assert_eq!(
            decode(b"12345678901234567890"),
            Err(InvalidValue::TooManyDigits { max: 19 })
        );
    }

    #[test]
    fn connect_limits_both_ways() {
        assert_eq!(
            decode_connect(b"9999999999"),
            Ok(Duration::from_millis(CONNECT_MAX_MS))
        );
        assert_eq!(
            decode_connect(b"10000000000"),
            Err(InvalidValue::TooManyDigits { max: 10 })
        );
        assert_eq!(decode_connect(b"-1"), Err(InvalidValue::NotADigit));
        assert_eq!(encode_connect(Duration::MAX).as_str(), "9999999999");
    }

    #[test]
    fn encode_rounds_down() {
        assert_eq!(encode(Duration::from_micros(480_999)).as_str(), "480");
        assert_eq!(encode(Duration::from_micros(999)).as_str(), "0");
    }

    #[test]
    fn every_encoded_budget_decodes() {
        // Found by the `codec_millis` fuzz target: `encode(Duration::MAX)` wrote u64::MAX, 20
        // digits, which `decode` rejects as too long.
        assert_eq!(encode(Duration::MAX).as_str(), MAX_MS.to_string());
        assert_eq!(
            decode(encode(Duration::MAX).as_bytes()),
            Ok(Duration::from_millis(MAX_MS))
        );
        let just_over = Duration::from_millis(MAX_MS) + Duration::from_millis(1);
        assert_eq!(
            decode(encode(just_over).as_bytes()),
            Ok(Duration::from_millis(MAX_MS))
        );
        assert_eq!(
            decode_connect(encode_connect(Duration::MAX).as_bytes()),
            Ok(Duration::from_millis(CONNECT_MAX_MS))
        );
    }
}
