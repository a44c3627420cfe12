//! Absolute Unix-epoch-millisecond carriers: `x-request-deadline` (HTTP, trusted clocks) and a
//! queue message's `deadline-epoch-ms`.
//!
//! An absolute deadline is only as good as the agreement between two wall clocks: a callee
//! whose clock runs 300 ms ahead sees a 400 ms budget as 100 ms (scenario [S3](crate::contract#s3)). That is why
//! relative milliseconds are the HTTP default, and absolute time is used where a message can
//! wait longer than any skew (a queue). The wall clock is read once, by the caller, at
//! conversion (rule [C1](crate::contract#c1)); from then on the budget lives on the monotonic clock.
//!
//! See the examples on [`decode`] and [`encode`].

use std::time::Duration;

use super::{Encoded, InvalidValue, parse_digits, trim};

/// More digits than any plausible epoch-millisecond timestamp (13 today) but bounded.
///
/// See the example on [`decode`].
pub const MAX_DIGITS: u8 = 16;

/// Decode an absolute deadline, given the wall clock's "now" in Unix milliseconds.
/// A deadline at or before `now_unix_ms` is a zero budget: already expired.
///
/// ```
/// use std::time::Duration;
/// use hopbudget::codec::epoch;
///
/// let now = 1_800_000_000_000;
/// assert_eq!(epoch::decode(b"1800000000400", now), Ok(Duration::from_millis(400)));
/// assert_eq!(epoch::decode(b"1799999999000", now), Ok(Duration::ZERO));
/// // At most `MAX_DIGITS` digits: anything longer is not a timestamp.
/// assert!(epoch::decode(&[b'9'; epoch::MAX_DIGITS as usize + 1], now).is_err());
/// ```
pub fn decode(value: &[u8], now_unix_ms: u64) -> Result<Duration, InvalidValue> {
    let at = parse_digits(trim(value), MAX_DIGITS)?;
    Ok(Duration::from_millis(at.saturating_sub(now_unix_ms)))
}

/// Encode "`budget` from now" as an absolute epoch-millisecond instant, rounded down.
///
/// ```
/// use std::time::Duration;
/// use hopbudget::codec::epoch;
///
/// let now = 1_800_000_000_000;
/// assert_eq!(epoch::encode(Duration::from_micros(400_900), now).as_str(), "1800000000400");
/// ```
pub fn encode(budget: Duration, now_unix_ms: u64) -> Encoded {
    let ms = u64::try_from(budget.as_millis()).unwrap_or(u64::MAX);
    let at = now_unix_ms
        .saturating_add(ms)
        .min(10u64.pow(MAX_DIGITS as u32) - 1);
    Encoded::decimal(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_deadline_is_zero_and_garbage_is_an_error() {
        assert_eq!(decode(b"5", 10), Ok(Duration::ZERO));
        assert_eq!(decode(b"abc", 10), Err(InvalidValue::NotADigit));
        assert_eq!(decode(b"-5", 10), Err(InvalidValue::NotADigit));
        assert_eq!(
            decode(b"12345678901234567", 10),
            Err(InvalidValue::TooManyDigits { max: 16 })
        );
    }

    #[test]
    fn encoder_edges_decode() {
        // Any budget at any wall-clock reading, including a clock already past the largest
        // deadline the header can carry, encodes to something the decoder reads.
        for now in [0, 1_800_000_000_000, 10u64.pow(MAX_DIGITS as u32), u64::MAX] {
            for budget in [Duration::ZERO, Duration::from_millis(400), Duration::MAX] {
                let back = decode(encode(budget, now).as_bytes(), now).unwrap();
                assert!(back <= budget, "{budget:?} at {now} came back as {back:?}");
            }
        }
    }

    #[test]
    fn encode_then_decode_at_the_same_instant_is_exact_to_the_ms() {
        let now = 1_800_000_000_123;
        let enc = encode(Duration::from_micros(400_900), now);
        assert_eq!(enc.as_str(), "1800000000523");
        assert_eq!(decode(enc.as_bytes(), now), Ok(Duration::from_millis(400)));
        assert_eq!(
            decode(encode(Duration::MAX, now).as_bytes(), now).map(|d| d > Duration::ZERO),
            Ok(true)
        );
    }
}
