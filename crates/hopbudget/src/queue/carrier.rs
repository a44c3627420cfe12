//! The one thing the queue boundary needs from a broker client: read and write a message's
//! string headers.
//!
//! Every broker client has its own header type (async-nats' `HeaderMap`, rdkafka's
//! `OwnedHeaders`, AMQP field tables, an `http::HeaderMap` in tests). Stamping and the
//! consumer gate are written once against [`HeaderCarrier`], so adapting another client is a
//! few lines: look a name up, insert a name and a value.

use std::collections::{BTreeMap, HashMap};

/// A message's headers, as the queue boundary reads and writes them.
///
/// `get` returns the raw bytes of the first value under `name`, so that a value that is not
/// UTF-8 is reported as a malformed deadline rather than taken for a missing one (rule [C9](crate::contract#c9)).
///
/// Implemented for `HashMap<String, String>`, `BTreeMap<String, String>`, `http::HeaderMap`,
/// async-nats' `HeaderMap` (feature `nats`) and rdkafka's `OwnedHeaders` (feature `kafka`).
///
/// # Examples
///
/// ```
/// use std::collections::HashMap;
/// use hopbudget::queue::HeaderCarrier;
///
/// /// A client whose headers are a list of pairs.
/// struct Pairs(Vec<(String, String)>);
///
/// impl HeaderCarrier for Pairs {
///     fn get(&self, name: &str) -> Option<&[u8]> {
///         self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_bytes())
///     }
///     fn set(&mut self, name: &str, value: &str) {
///         self.0.retain(|(k, _)| k != name);
///         self.0.push((name.to_owned(), value.to_owned()));
///     }
/// }
///
/// let mut headers = Pairs(Vec::new());
/// headers.set("deadline-epoch-ms", "1800000000000");
/// assert_eq!(headers.get("deadline-epoch-ms"), Some(&b"1800000000000"[..]));
/// ```
pub trait HeaderCarrier {
    /// The first value of header `name`, if present.
    ///
    /// See the [example](HeaderCarrier#examples).
    fn get(&self, name: &str) -> Option<&[u8]>;

    /// Set header `name` to `value`, replacing any value it had where the client allows it.
    /// Names come from a validated profile and values are ASCII digits or a `traceparent`, so
    /// every client can store them.
    ///
    /// See the [example](HeaderCarrier#examples).
    fn set(&mut self, name: &str, value: &str);
}

impl<C: HeaderCarrier + ?Sized> HeaderCarrier for &mut C {
    fn get(&self, name: &str) -> Option<&[u8]> {
        (**self).get(name)
    }

    fn set(&mut self, name: &str, value: &str) {
        (**self).set(name, value)
    }
}

impl<S: std::hash::BuildHasher> HeaderCarrier for HashMap<String, String, S> {
    fn get(&self, name: &str) -> Option<&[u8]> {
        HashMap::get(self, name).map(String::as_bytes)
    }

    fn set(&mut self, name: &str, value: &str) {
        self.insert(name.to_owned(), value.to_owned());
    }
}

impl HeaderCarrier for BTreeMap<String, String> {
    fn get(&self, name: &str) -> Option<&[u8]> {
        BTreeMap::get(self, name).map(String::as_bytes)
    }

    fn set(&mut self, name: &str, value: &str) {
        self.insert(name.to_owned(), value.to_owned());
    }
}

impl HeaderCarrier for http::HeaderMap {
    fn get(&self, name: &str) -> Option<&[u8]> {
        http::HeaderMap::get(self, name).map(http::HeaderValue::as_bytes)
    }

    fn set(&mut self, name: &str, value: &str) {
        // A name or value http rejects cannot come from a validated profile; dropping it
        // leaves the message without that header, which the consumer counts as missing.
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(name.as_bytes()),
            http::HeaderValue::from_str(value),
        ) {
            self.insert(name, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(mut c: impl HeaderCarrier) {
        assert_eq!(c.get("deadline-epoch-ms"), None);
        c.set("deadline-epoch-ms", "1");
        c.set("deadline-epoch-ms", "2");
        assert_eq!(c.get("deadline-epoch-ms"), Some(&b"2"[..]));
    }

    #[test]
    fn every_builtin_carrier_replaces_on_set() {
        round_trip(HashMap::<String, String>::new());
        round_trip(BTreeMap::<String, String>::new());
        round_trip(http::HeaderMap::new());
    }
}
