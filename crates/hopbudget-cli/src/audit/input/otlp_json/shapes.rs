//! The OTLP JSON shapes the decoder reads a line into, as lenient as the protobuf JSON
//! mapping allows: unknown fields are ignored, numbers may be strings or numbers, strings are
//! borrowed from the line when they hold no escapes. serde reads them (`Deserialize`), and so
//! does the scanner (`scan.rs`), each into these same shapes.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::audit::input::attributes::AttrValue;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RequestJson<'a> {
    #[serde(default, borrow, alias = "resource_spans")]
    pub(super) resource_spans: Vec<ResourceSpansJson<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ResourceSpansJson<'a> {
    #[serde(default, borrow)]
    pub(super) resource: Option<ResourceJson<'a>>,
    #[serde(
        default,
        borrow,
        alias = "scope_spans",
        alias = "instrumentationLibrarySpans"
    )]
    pub(super) scope_spans: Vec<ScopeSpansJson<'a>>,
}

#[derive(Deserialize)]
pub(super) struct ResourceJson<'a> {
    #[serde(default, borrow)]
    pub(super) attributes: Vec<KeyValueJson<'a>>,
}

#[derive(Deserialize)]
pub(super) struct ScopeSpansJson<'a> {
    #[serde(default, borrow)]
    pub(super) spans: Vec<SpanJson<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SpanJson<'a> {
    #[serde(default, borrow, alias = "trace_id")]
    pub(super) trace_id: Option<Scalar<'a>>,
    #[serde(default, borrow, alias = "span_id")]
    pub(super) span_id: Option<Scalar<'a>>,
    #[serde(default, borrow, alias = "parent_span_id")]
    pub(super) parent_span_id: Option<Scalar<'a>>,
    #[serde(default, borrow)]
    pub(super) name: Option<Scalar<'a>>,
    #[serde(default, borrow)]
    pub(super) kind: Option<Scalar<'a>>,
    #[serde(default, borrow, alias = "start_time_unix_nano")]
    pub(super) start_time_unix_nano: Option<Scalar<'a>>,
    #[serde(default, borrow, alias = "end_time_unix_nano")]
    pub(super) end_time_unix_nano: Option<Scalar<'a>>,
    #[serde(default, borrow)]
    pub(super) attributes: Vec<KeyValueJson<'a>>,
    #[serde(default, borrow)]
    pub(super) status: Option<StatusJson<'a>>,
    #[serde(default, borrow)]
    pub(super) events: Vec<EventJson<'a>>,
}

#[derive(Deserialize)]
pub(super) struct StatusJson<'a> {
    #[serde(default, borrow)]
    pub(super) code: Option<Scalar<'a>>,
}

#[derive(Deserialize)]
pub(super) struct EventJson<'a> {
    #[serde(default, borrow)]
    pub(super) name: Option<Scalar<'a>>,
    #[serde(default, borrow)]
    pub(super) attributes: Vec<KeyValueJson<'a>>,
}

#[derive(Deserialize)]
pub(super) struct KeyValueJson<'a> {
    #[serde(borrow)]
    pub(super) key: Cow<'a, str>,
    #[serde(default, borrow)]
    pub(super) value: Option<AnyValueJson<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct AnyValueJson<'a> {
    #[serde(default, borrow, alias = "string_value")]
    pub(super) string_value: Option<Scalar<'a>>,
    /// `intValue`, or `boolValue`: a value holds one of the two (OTLP's `AnyValue` is a
    /// oneof), so a bool shares the slot (as [`Scalar::Bool`]) rather than making every
    /// attribute value a field larger, which cost about 170 instructions a span.
    #[serde(
        default,
        borrow,
        alias = "int_value",
        alias = "boolValue",
        alias = "bool_value"
    )]
    pub(super) int_value: Option<Scalar<'a>>,
    #[serde(default, borrow, alias = "double_value")]
    pub(super) double_value: Option<Scalar<'a>>,
    /// A captured header is an array of strings (one per header line).
    #[serde(default, borrow, alias = "array_value")]
    pub(super) array_value: Option<ArrayValueJson<'a>>,
}

#[derive(Deserialize)]
pub(super) struct ArrayValueJson<'a> {
    #[serde(default, borrow)]
    pub(super) values: Vec<AnyValueJson<'a>>,
}

impl AttrValue for AnyValueJson<'_> {
    fn first_str(&self) -> Option<&str> {
        self.as_str().or_else(|| {
            self.array_value
                .as_ref()?
                .values
                .first()
                .and_then(AnyValueJson::as_str)
        })
    }

    fn as_str(&self) -> Option<&str> {
        self.string_value.as_ref()?.as_str()
    }

    fn as_i64(&self) -> Option<i64> {
        [&self.int_value, &self.double_value, &self.string_value]
            .into_iter()
            .find_map(|v| v.as_ref()?.as_i64())
    }

    fn as_bool(&self) -> Option<bool> {
        match self.int_value.as_ref() {
            Some(Scalar::Bool(b)) => Some(*b),
            _ => self.as_str()?.parse().ok(),
        }
    }
}

/// Any JSON scalar; arrays and objects are skipped as [`Scalar::Other`].
pub(super) enum Scalar<'a> {
    Str(Cow<'a, str>),
    Int(i64),
    UInt(u64),
    Float(f64),
    Bool(bool),
    Null,
    Other,
}

impl Scalar<'_> {
    pub(super) fn as_str(&self) -> Option<&str> {
        match self {
            Scalar::Str(s) => Some(s),
            _ => None,
        }
    }

    pub(super) fn as_i64(&self) -> Option<i64> {
        match self {
            Scalar::Int(i) => Some(*i),
            Scalar::UInt(u) => i64::try_from(*u).ok(),
            Scalar::Float(f) if f.is_finite() && f.abs() < 9.0e18 => Some(f.round() as i64),
            Scalar::Str(s) => match plain_digits(s) {
                Some(v) => i64::try_from(v).ok(),
                None => s.trim().parse().ok(),
            },
            _ => None,
        }
    }

    pub(super) fn as_u64(&self) -> Option<u64> {
        match self {
            Scalar::Int(i) => u64::try_from(*i).ok(),
            Scalar::UInt(u) => Some(*u),
            Scalar::Str(s) => plain_digits(s).or_else(|| s.trim().parse().ok()),
            _ => None,
        }
    }
}

/// The value of 1 to 19 ASCII digits (what OTLP JSON writes for 64-bit numbers: nanosecond
/// times have 19), which always fits a `u64`; `None` for anything else, which then goes
/// through `trim` and `parse`. `trim().parse()` cost about 830 instructions per span.
fn plain_digits(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 19 {
        return None;
    }
    s.bytes().try_fold(0u64, |v, b| {
        b.is_ascii_digit().then(|| v * 10 + u64::from(b - b'0'))
    })
}

impl<'de: 'a, 'a> Deserialize<'de> for Scalar<'a> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Scalar<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Scalar::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Scalar::Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Scalar::Str(Cow::Owned(v)))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Scalar::Int(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Scalar::UInt(v))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
                Ok(Scalar::Float(v))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
                Ok(Scalar::Bool(v))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Scalar::Null)
            }
            fn visit_none<E>(self) -> Result<Self::Value, E> {
                Ok(Scalar::Null)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}
