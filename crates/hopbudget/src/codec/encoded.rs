use std::fmt;

/// An encoded header value held on the stack, ready to go on the wire: what every encoder in
/// [`codec`](super) returns (`grpc-timeout`'s digits and unit, relative or epoch milliseconds).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use hopbudget::codec::{Encoded, grpc_timeout, millis};
///
/// let encoded: Encoded = grpc_timeout::encode(Duration::from_millis(480));
/// assert_eq!(encoded.as_str(), "480000u");
/// assert_eq!(encoded.as_bytes(), b"480000u");
/// assert_eq!(encoded.to_string(), "480000u");
/// let mut request = http::Request::new(());
/// request.headers_mut().insert("grpc-timeout", encoded.to_header_value());
/// assert_eq!(millis::encode(Duration::from_millis(480)).as_str(), "480");
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Encoded {
    // Digits are written right-aligned to end at `DIGITS_END`; a unit letter, if any, follows.
    buf: [u8; DIGITS_END + 1],
    start: u8,
    end: u8,
}

/// A `u64` never needs more than 20 decimal digits.
const DIGITS_END: usize = 20;

impl Encoded {
    /// `n` in decimal.
    pub(crate) fn decimal(mut n: u64) -> Self {
        let mut buf = [0u8; DIGITS_END + 1];
        let mut i = DIGITS_END;
        loop {
            i -= 1;
            buf[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                return Self {
                    buf,
                    start: i as u8,
                    end: DIGITS_END as u8,
                };
            }
        }
    }

    /// `n` in decimal followed by the unit letter `unit` (`grpc-timeout`).
    pub(crate) fn with_unit(n: u64, unit: u8) -> Self {
        let mut encoded = Self::decimal(n);
        encoded.buf[DIGITS_END] = unit;
        encoded.end = DIGITS_END as u8 + 1;
        encoded
    }

    /// The value as text, e.g. `"480m"`.
    ///
    /// See the [example](Self#examples).
    pub fn as_str(&self) -> &str {
        // Only ASCII digits and a unit letter are ever written.
        std::str::from_utf8(self.as_bytes()).unwrap_or("0")
    }

    /// The value as bytes, ready for a header.
    ///
    /// See the [example](Self#examples).
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[self.start as usize..self.end as usize]
    }

    /// As an HTTP header value.
    ///
    /// See the [example](Self#examples).
    pub fn to_header_value(&self) -> http::HeaderValue {
        // Digits and a letter are always a valid header value.
        http::HeaderValue::from_bytes(self.as_bytes())
            .unwrap_or_else(|_| http::HeaderValue::from_static("0"))
    }
}

impl fmt::Debug for Encoded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Encoded({:?})", self.as_str())
    }
}

impl fmt::Display for Encoded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_and_unit_round_trip() {
        for n in [0u64, 7, 10, 12_345, u64::MAX] {
            assert_eq!(Encoded::decimal(n).as_str(), n.to_string());
            assert_eq!(Encoded::with_unit(n, b'm').as_str(), format!("{n}m"));
        }
    }
}
