//! The `grpc-timeout` header, exactly as the gRPC over HTTP/2 protocol spec defines it:
//!
//! ```text
//! Timeout      → "grpc-timeout" TimeoutValue TimeoutUnit
//! TimeoutValue → {positive integer as ASCII string of at most 8 digits}
//! TimeoutUnit  → Hour / Minute / Second / Millisecond / Microsecond / Nanosecond
//!                "H"    "M"      "S"      "m"           "u"           "n"
//! ```
//!
//! Edge cases, decided once so every hop agrees with grpc-go, grpc-java and grpcio:
//!
//! | input | result |
//! |---|---|
//! | `0n`, `0m`, `0S` ... | a zero budget: already expired (rule [C9](crate::contract#c9)), not "no deadline" |
//! | more than 8 digits (`123456789m`) | [`InvalidValue::TooManyDigits`]: malformed, 400 / INVALID_ARGUMENT |
//! | unknown or wrong-case unit (`10s`, `10x`) | [`InvalidValue::UnknownUnit`] |
//! | no unit (`100`) / no digits (`m`) | [`InvalidValue::MissingUnit`] / [`InvalidValue::MissingDigits`] |
//! | `99999999H` (about 11 400 years) | decoded exactly; a server then clamps it to its profile maximum |
//! | surrounding spaces | ignored, as HTTP allows optional whitespace around values |
//!
//! Encoding picks the most precise unit whose value fits in 8 digits and rounds *down*, so
//! what goes on the wire is never more than the budget (rule [C2](crate::contract#c2)). Budgets beyond the largest
//! encodable value (`99999999H`) are sent as that value.
//!
//! See the examples on [`decode`] and [`encode`].

use std::time::Duration;

use super::{Encoded, InvalidValue, parse_digits, trim};

/// The largest value the header may carry in any unit.
///
/// See the example on [`decode`].
pub const MAX_VALUE: u64 = 99_999_999;
/// The spec's digit limit.
///
/// See the example on [`decode`].
pub const MAX_DIGITS: u8 = 8;

/// Decode a `grpc-timeout` value.
///
/// ```
/// use std::time::Duration;
/// use hopbudget::codec::grpc_timeout;
///
/// assert_eq!(grpc_timeout::decode(b"100m"), Ok(Duration::from_millis(100)));
/// assert_eq!(grpc_timeout::decode(b"2M"), Ok(Duration::from_secs(120)));
/// assert!(grpc_timeout::decode(b"100s").is_err()); // units are case-sensitive
/// // The spec's limits: at most `MAX_DIGITS` digits, so at most `MAX_VALUE` in any unit.
/// assert_eq!(grpc_timeout::MAX_VALUE.to_string().len(), usize::from(grpc_timeout::MAX_DIGITS));
/// assert_eq!(grpc_timeout::decode(b"99999999H"), Ok(Duration::from_secs(grpc_timeout::MAX_VALUE * 3600)));
/// ```
pub fn decode(value: &[u8]) -> Result<Duration, InvalidValue> {
    let value = trim(value);
    let Some((&unit, digits)) = value.split_last() else {
        return Err(InvalidValue::Empty);
    };
    if unit.is_ascii_digit() {
        // Check the digits first so a 9-digit number is reported as too long, not unit-less.
        parse_digits(value, MAX_DIGITS)?;
        return Err(InvalidValue::MissingUnit);
    }
    if digits.is_empty() {
        return Err(InvalidValue::MissingDigits);
    }
    let n = parse_digits(digits, MAX_DIGITS)?;
    // n ≤ 99 999 999, so none of these multiplications can overflow a u64.
    Ok(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        other => return Err(InvalidValue::UnknownUnit(other)),
    })
}

/// Encode a budget as a `grpc-timeout` value: the most precise unit that fits, rounded down.
///
/// ```
/// use std::time::Duration;
/// use hopbudget::codec::grpc_timeout;
///
/// assert_eq!(grpc_timeout::encode(Duration::from_millis(480)).as_str(), "480000u");
/// assert_eq!(grpc_timeout::encode(Duration::from_secs(3600)).as_str(), "3600000m");
/// ```
pub fn encode(budget: Duration) -> Encoded {
    let secs = budget.as_secs();
    let sub_nanos = u64::from(budget.subsec_nanos());
    let (value, unit) = if secs == 0 && sub_nanos <= MAX_VALUE {
        (sub_nanos, b'n')
    } else if secs < 100 && secs * 1_000_000 + sub_nanos / 1_000 <= MAX_VALUE {
        (secs * 1_000_000 + sub_nanos / 1_000, b'u')
    } else if secs < 100_000 && secs * 1_000 + sub_nanos / 1_000_000 <= MAX_VALUE {
        (secs * 1_000 + sub_nanos / 1_000_000, b'm')
    } else if secs <= MAX_VALUE {
        (secs, b'S')
    } else if secs / 60 <= MAX_VALUE {
        (secs / 60, b'M')
    } else {
        ((secs / 3600).min(MAX_VALUE), b'H')
    };
    Encoded::with_unit(value, unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_every_unit() {
        assert_eq!(decode(b"1H"), Ok(Duration::from_secs(3600)));
        assert_eq!(decode(b"1M"), Ok(Duration::from_secs(60)));
        assert_eq!(decode(b"1S"), Ok(Duration::from_secs(1)));
        assert_eq!(decode(b"1m"), Ok(Duration::from_millis(1)));
        assert_eq!(decode(b"1u"), Ok(Duration::from_micros(1)));
        assert_eq!(decode(b"1n"), Ok(Duration::from_nanos(1)));
        assert_eq!(decode(b" 100m "), Ok(Duration::from_millis(100)));
    }

    #[test]
    fn documented_edge_cases() {
        assert_eq!(decode(b"0m"), Ok(Duration::ZERO));
        assert_eq!(decode(b"99999999m"), Ok(Duration::from_millis(99_999_999)));
        assert_eq!(
            decode(b"123456789m"),
            Err(InvalidValue::TooManyDigits { max: 8 })
        );
        assert_eq!(
            decode(b"123456789"),
            Err(InvalidValue::TooManyDigits { max: 8 })
        );
        assert_eq!(decode(b"10s"), Err(InvalidValue::UnknownUnit(b's')));
        assert_eq!(decode(b"10x"), Err(InvalidValue::UnknownUnit(b'x')));
        assert_eq!(decode(b"100"), Err(InvalidValue::MissingUnit));
        assert_eq!(decode(b"m"), Err(InvalidValue::MissingDigits));
        assert_eq!(decode(b""), Err(InvalidValue::Empty));
        assert_eq!(decode(b"-5m"), Err(InvalidValue::NotADigit));
        assert_eq!(
            decode(b"99999999H"),
            Ok(Duration::from_secs(99_999_999 * 3600))
        );
    }

    #[test]
    fn encodes_most_precise_unit_rounding_down() {
        let e = |d| encode(d).as_str().to_owned();
        assert_eq!(e(Duration::ZERO), "0n");
        assert_eq!(e(Duration::from_nanos(99_999_999)), "99999999n");
        assert_eq!(e(Duration::from_millis(100)), "100000u");
        assert_eq!(e(Duration::from_nanos(100_000_999)), "100000u");
        assert_eq!(e(Duration::from_secs(99)), "99000000u");
        assert_eq!(e(Duration::from_secs(100)), "100000m");
        assert_eq!(e(Duration::from_millis(99_999_999)), "99999999m");
        assert_eq!(e(Duration::from_secs(100_000)), "100000S");
        assert_eq!(e(Duration::from_secs(99_999_999)), "99999999S");
        assert_eq!(e(Duration::from_secs(100_000_000)), "1666666M");
        assert_eq!(e(Duration::from_secs(99_999_999 * 60 + 60)), "1666666H");
        assert_eq!(e(Duration::MAX), "99999999H");
    }

    #[test]
    fn encoder_edges_decode() {
        // The largest budgets a caller can hold come back through the decoder, never above.
        for d in [
            Duration::MAX,
            Duration::new(u64::MAX, 0),
            Duration::from_secs(MAX_VALUE * 3600 + 3599),
            Duration::new(99, 999_999_999),
            Duration::new(99_999, 999_999_999),
        ] {
            let back = decode(encode(d).as_bytes()).unwrap();
            assert!(back <= d, "{d:?} came back as {back:?}");
        }
    }

    #[test]
    fn encode_then_decode_never_grows() {
        for ms in [
            0u64,
            1,
            5,
            99,
            480,
            1_000,
            99_999,
            100_001,
            5_000_000,
            u32::MAX as u64,
        ] {
            let d = Duration::from_millis(ms) + Duration::from_nanos(777);
            let back = decode(encode(d).as_bytes()).unwrap();
            assert!(back <= d, "{d:?} came back as {back:?}");
        }
    }
}
