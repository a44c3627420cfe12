//! A scanner written for the shape OTLP JSON exporters write (#36 item 8): it reads a line's
//! bytes straight into the borrowed shapes `convert` reads, without serde's generic
//! machinery, and keeps only the attributes the audit looks at. serde_json cost about 11,700
//! instructions a span here, about 150 for each of the ~80 short strings.
//!
//! It accepts only what it is sure serde_json reads the same way: strings without escapes or
//! control characters and non-negative integers that fit a `u64` where a value is read; where
//! a value is checked and dropped (unknown fields, attributes the audit does not read), simple
//! escapes (no surrogates) and plain decimals too; strict JSON elsewhere; no duplicate known field, nesting at most [`MAX_DEPTH`]. On anything else
//! it gives up (`None`) and the whole line goes through serde_json, so odd input (escapes,
//! floats, errors) decodes, or fails, exactly as it always did. It never panics: every byte
//! is read through `get`.
//!
//! One file, though long: the scanner is one reader over one cursor ([`Scan`]), whose
//! methods (one per shape) share that state and are not used apart.

use std::borrow::Cow;

use hopbudget::observe::fields;

use super::shapes::{
    AnyValueJson, ArrayValueJson, EventJson, KeyValueJson, RequestJson, ResourceJson,
    ResourceSpansJson, Scalar, ScopeSpansJson, SpanJson, StatusJson,
};
use crate::audit::input::attributes;
use crate::audit::span::deadline_header;
use crate::audit::status;

/// Nesting (objects and arrays) past this gives up: well inside serde_json's own limit of
/// 128, so a line accepted here is never one serde_json refuses for depth, and the
/// recursion of [`Scan::skip`] stays shallow.
const MAX_DEPTH: u32 = 64;

/// Giving up: the line goes to serde_json.
type Fallback<T> = Option<T>;

/// The line, or `None` when it is not in the plain shape (then serde_json reads it).
pub(super) fn request(text: &str) -> Fallback<RequestJson<'_>> {
    let mut s = Scan {
        text,
        i: 0,
        depth: 0,
        dropped: false,
    };
    let mut resource_spans = None;
    s.object(|s, key| match key {
        "resourceSpans" | "resource_spans" => {
            first(&resource_spans)?;
            let mut all = Vec::new();
            s.array(|s| {
                all.push(s.resource_spans()?);
                Some(())
            })?;
            resource_spans = Some(all);
            Some(())
        }
        _ => s.skip(),
    })?;
    s.ws();
    if s.i != text.len() {
        return None;
    }
    Some(RequestJson {
        resource_spans: resource_spans.unwrap_or_default(),
    })
}

/// A known field seen twice is serde's "duplicate field" error: give up.
fn first<T>(slot: &Option<T>) -> Fallback<()> {
    slot.is_none().then_some(())
}

/// A span attribute `convert` reads; the others are checked and dropped.
fn span_key_read(key: &str) -> bool {
    matches!(
        key,
        status::GRPC_STATUS
            | status::HTTP_STATUS
            | status::HTTP_STATUS_OLD
            | status::EXCEPTION_TYPE
            | fields::SERVICE
            | fields::REMAINING_MS
            | fields::SOURCE
            | fields::MARGIN_MS
            | fields::OUTCOME
            | fields::REQUIRED_MS
            | fields::OVERRUN_MS
            | attributes::PROXY
            | attributes::TOLD_MS
            | attributes::MATCHED
            | attributes::SERVER_ADDRESS
    ) || deadline_header(key).is_some()
}

struct Scan<'a> {
    text: &'a str,
    i: usize,
    depth: u32,
    /// Reading the value of an attribute that is dropped: its strings may hold escapes and
    /// its numbers be decimals (checked, not decoded).
    dropped: bool,
}

impl<'a> Scan<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.i).copied()
    }

    /// JSON's whitespace, as serde_json skips it.
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    fn eat(&mut self, b: u8) -> Fallback<()> {
        self.ws();
        (self.peek()? == b).then(|| self.i += 1)
    }

    /// After whitespace, `null` (consumed: `true`) or something else (`false`).
    fn null(&mut self) -> Fallback<bool> {
        self.ws();
        if self.peek()? != b'n' {
            return Some(false);
        }
        self.literal(b"null")?;
        Some(true)
    }

    fn literal(&mut self, word: &[u8]) -> Fallback<()> {
        let end = self.i.checked_add(word.len())?;
        (self.text.as_bytes().get(self.i..end)? == word).then(|| self.i = end)
    }

    /// A string without escapes or control characters, borrowed from the line.
    fn string(&mut self) -> Fallback<&'a str> {
        self.eat(b'"')?;
        let start = self.i;
        self.skip_to_string_stop();
        if self.peek()? != b'"' {
            return None;
        }
        let s = self.text.get(start..self.i)?;
        self.i += 1;
        Some(s)
    }

    /// On to the next `"`, `\\` or control character (or the end), a word at a
    /// time (a byte at a time through [`Scan::peek`] cost about 8 instructions a byte).
    fn skip_to_string_stop(&mut self) {
        let rest = self.text.as_bytes().get(self.i..).unwrap_or_default();
        // `memchr` costs more than it saves on strings this short: eight bytes at a time in a
        // word instead (a flagged byte can only be wrong above a true one, so the lowest
        // flag is the first stop), then the tail a byte at a time.
        const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
        const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
        let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
        let mut at = 0;
        for word in rest.chunks_exact(8) {
            let mut w = [0u8; 8];
            w.copy_from_slice(word);
            let v = u64::from_le_bytes(w);
            let stops = zero(v ^ (ONES * u64::from(b'"')))
                | zero(v ^ (ONES * u64::from(b'\\')))
                | (v.wrapping_sub(ONES * 0x20) & !v & HIGH);
            if stops != 0 {
                self.i += at + (stops.trailing_zeros() / 8) as usize;
                return;
            }
            at += 8;
        }
        let tail = rest.get(at..).unwrap_or_default();
        self.i += at
            + tail
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                .unwrap_or(tail.len());
    }

    /// A string whose value is not used: `None` inside when it holds escapes (each one
    /// checked as both of serde_json's string readers check it; a `\u` surrogate gives up).
    fn string_checked(&mut self) -> Fallback<Option<&'a str>> {
        self.eat(b'"')?;
        let start = self.i;
        let mut escaped = false;
        self.skip_to_string_stop();
        loop {
            match self.peek()? {
                b'"' => break,
                0..=0x1f => return None,
                b'\\' => {
                    escaped = true;
                    self.i += 1;
                    match self.peek()? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 1,
                        b'u' => {
                            let end = self.i.checked_add(5)?;
                            let hex = self.text.get(self.i + 1..end)?;
                            let n = u16::from_str_radix(hex, 16).ok()?;
                            if !hex.bytes().all(|b| b.is_ascii_hexdigit())
                                || (0xD800..=0xDFFF).contains(&n)
                            {
                                return None;
                            }
                            self.i = end;
                        }
                        _ => return None,
                    }
                }
                _ => self.i += 1,
            }
        }
        let s = self.text.get(start..self.i)?;
        self.i += 1;
        Some((!escaped).then_some(s))
    }

    /// `{ "key": value, ... }`, each value read by `field`.
    fn object(&mut self, field: impl FnMut(&mut Self, &'a str) -> Fallback<()>) -> Fallback<()> {
        self.object_keys(false, field)
    }

    /// An object; with `any_key`, keys may hold escapes (for an object that is dropped).
    fn object_keys(
        &mut self,
        any_key: bool,
        mut field: impl FnMut(&mut Self, &'a str) -> Fallback<()>,
    ) -> Fallback<()> {
        self.eat(b'{')?;
        self.open()?;
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
        } else {
            loop {
                let key = if any_key {
                    self.string_checked()?.unwrap_or("")
                } else {
                    self.string()?
                };
                self.eat(b':')?;
                field(self, key)?;
                self.ws();
                match self.peek()? {
                    b',' => self.i += 1,
                    b'}' => {
                        self.i += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        self.depth -= 1;
        Some(())
    }

    /// `[ value, ... ]`, each value read by `element`.
    fn array(&mut self, mut element: impl FnMut(&mut Self) -> Fallback<()>) -> Fallback<()> {
        self.eat(b'[')?;
        self.open()?;
        self.ws();
        if self.peek()? == b']' {
            self.i += 1;
        } else {
            loop {
                element(self)?;
                self.ws();
                match self.peek()? {
                    b',' => self.i += 1,
                    b']' => {
                        self.i += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        self.depth -= 1;
        Some(())
    }

    fn open(&mut self) -> Fallback<()> {
        self.depth += 1;
        (self.depth <= MAX_DEPTH).then_some(())
    }

    /// Any JSON value, checked and dropped (serde's `IgnoredAny`).
    fn skip(&mut self) -> Fallback<()> {
        self.ws();
        match self.peek()? {
            b'"' => self.string_checked().map(drop),
            b'{' => self.object_keys(true, |s, _| s.skip()),
            b'[' => self.array(Self::skip),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    /// A number by JSON's grammar, dropped.
    fn number(&mut self) -> Fallback<()> {
        if self.peek()? == b'-' {
            self.i += 1;
        }
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            self.some_digits()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            self.some_digits()?;
        }
        Some(())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.i += 1;
        }
    }

    fn some_digits(&mut self) -> Fallback<()> {
        let start = self.i;
        self.digits();
        (self.i > start).then_some(())
    }

    /// An `Option<Scalar>` field: `null` is `None`, as serde reads an `Option`. Numbers
    /// other than a non-negative integer that fits a `u64` give up (serde_json's float and
    /// `-0` rules are its own).
    fn scalar(&mut self) -> Fallback<Option<Scalar<'a>>> {
        self.ws();
        if self.dropped {
            return self.dropped_scalar();
        }
        Some(Some(match self.peek()? {
            b'"' => Scalar::Str(Cow::Borrowed(self.string()?)),
            b'n' => {
                self.literal(b"null")?;
                return Some(None);
            }
            b't' => {
                self.literal(b"true")?;
                Scalar::Bool(true)
            }
            b'f' => {
                self.literal(b"false")?;
                Scalar::Bool(false)
            }
            b'{' | b'[' => {
                self.skip()?;
                Scalar::Other
            }
            b'0' => {
                self.i += 1;
                if let Some(b'0'..=b'9' | b'.' | b'e' | b'E') = self.peek() {
                    return None;
                }
                Scalar::UInt(0)
            }
            b'1'..=b'9' => {
                let mut v = 0u64;
                while let Some(b @ b'0'..=b'9') = self.peek() {
                    v = v.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
                    self.i += 1;
                }
                if let Some(b'.' | b'e' | b'E') = self.peek() {
                    return None;
                }
                Scalar::UInt(v)
            }
            _ => return None,
        }))
    }

    /// A scalar of an attribute that is dropped: only checked, [`Scalar::Other`] stands for
    /// it. Numbers: at most 18 integer digits, a fraction, no exponent (serde_json reads
    /// these as numbers whatever the digits; an exponent may be out of its range).
    fn dropped_scalar(&mut self) -> Fallback<Option<Scalar<'a>>> {
        match self.peek()? {
            b'"' => {
                self.string_checked()?;
            }
            b'n' => {
                self.literal(b"null")?;
                return Some(None);
            }
            b't' | b'f' | b'{' | b'[' => self.skip()?,
            b'-' | b'0'..=b'9' => {
                if self.peek()? == b'-' {
                    self.i += 1;
                }
                let start = self.i;
                match self.peek()? {
                    b'0' => self.i += 1,
                    b'1'..=b'9' => self.digits(),
                    _ => return None,
                }
                if self.i - start > 18 {
                    return None;
                }
                if self.peek() == Some(b'.') {
                    self.i += 1;
                    self.some_digits()?;
                }
                if let Some(b'0'..=b'9' | b'.' | b'e' | b'E') = self.peek() {
                    return None;
                }
            }
            _ => return None,
        }
        Some(Some(Scalar::Other))
    }

    /// A field holding an `Option<Scalar>`, read once.
    fn scalar_field(&mut self, slot: &mut Option<Option<Scalar<'a>>>) -> Fallback<()> {
        first(slot)?;
        *slot = Some(self.scalar()?);
        Some(())
    }

    fn resource_spans(&mut self) -> Fallback<ResourceSpansJson<'a>> {
        let mut resource = None;
        let mut scope_spans = None;
        self.object(|s, key| match key {
            "resource" => {
                first(&resource)?;
                resource = Some(if s.null()? { None } else { Some(s.resource()?) });
                Some(())
            }
            "scopeSpans" | "scope_spans" | "instrumentationLibrarySpans" => {
                first(&scope_spans)?;
                let mut all = Vec::new();
                s.array(|s| {
                    all.push(s.scope_spans()?);
                    Some(())
                })?;
                scope_spans = Some(all);
                Some(())
            }
            _ => s.skip(),
        })?;
        Some(ResourceSpansJson {
            resource: resource.flatten(),
            scope_spans: scope_spans.unwrap_or_default(),
        })
    }

    fn resource(&mut self) -> Fallback<ResourceJson<'a>> {
        let mut attributes = None;
        self.object(|s, key| match key {
            "attributes" => {
                first(&attributes)?;
                attributes = Some(s.attributes(|k| k == fields::SERVICE)?);
                Some(())
            }
            _ => s.skip(),
        })?;
        Some(ResourceJson {
            attributes: attributes.unwrap_or_default(),
        })
    }

    fn scope_spans(&mut self) -> Fallback<ScopeSpansJson<'a>> {
        let mut spans = None;
        self.object(|s, key| match key {
            "spans" => {
                first(&spans)?;
                let mut all = Vec::new();
                s.array(|s| {
                    all.push(s.span()?);
                    Some(())
                })?;
                spans = Some(all);
                Some(())
            }
            _ => s.skip(),
        })?;
        Some(ScopeSpansJson {
            spans: spans.unwrap_or_default(),
        })
    }

    fn span(&mut self) -> Fallback<SpanJson<'a>> {
        let (mut trace_id, mut span_id, mut parent_span_id) = (None, None, None);
        let (mut name, mut kind, mut start, mut end) = (None, None, None, None);
        let (mut attributes, mut status, mut events) = (None, None, None);
        self.object(|s, key| match key {
            "traceId" | "trace_id" => s.scalar_field(&mut trace_id),
            "spanId" | "span_id" => s.scalar_field(&mut span_id),
            "parentSpanId" | "parent_span_id" => s.scalar_field(&mut parent_span_id),
            "name" => s.scalar_field(&mut name),
            "kind" => s.scalar_field(&mut kind),
            "startTimeUnixNano" | "start_time_unix_nano" => s.scalar_field(&mut start),
            "endTimeUnixNano" | "end_time_unix_nano" => s.scalar_field(&mut end),
            "attributes" => {
                first(&attributes)?;
                attributes = Some(s.attributes(span_key_read)?);
                Some(())
            }
            "status" => {
                first(&status)?;
                status = Some(if s.null()? { None } else { Some(s.status()?) });
                Some(())
            }
            "events" => {
                first(&events)?;
                let mut all = Vec::new();
                s.array(|s| {
                    all.push(s.event()?);
                    Some(())
                })?;
                events = Some(all);
                Some(())
            }
            _ => s.skip(),
        })?;
        Some(SpanJson {
            trace_id: trace_id.flatten(),
            span_id: span_id.flatten(),
            parent_span_id: parent_span_id.flatten(),
            name: name.flatten(),
            kind: kind.flatten(),
            start_time_unix_nano: start.flatten(),
            end_time_unix_nano: end.flatten(),
            attributes: attributes.unwrap_or_default(),
            status: status.flatten(),
            events: events.unwrap_or_default(),
        })
    }

    fn status(&mut self) -> Fallback<StatusJson<'a>> {
        let mut code = None;
        self.object(|s, key| match key {
            "code" => s.scalar_field(&mut code),
            _ => s.skip(),
        })?;
        Some(StatusJson {
            code: code.flatten(),
        })
    }

    fn event(&mut self) -> Fallback<EventJson<'a>> {
        let (mut name, mut attributes) = (None, None);
        self.object(|s, key| match key {
            "name" => s.scalar_field(&mut name),
            "attributes" => {
                first(&attributes)?;
                attributes = Some(s.attributes(|k| k == status::EXCEPTION_TYPE)?);
                Some(())
            }
            _ => s.skip(),
        })?;
        Some(EventJson {
            name: name.flatten(),
            attributes: attributes.unwrap_or_default(),
        })
    }

    /// An attribute list, keeping only the keys `read` wants (every one is still checked).
    fn attributes(&mut self, read: impl Fn(&str) -> bool) -> Fallback<Vec<KeyValueJson<'a>>> {
        let mut kept = Vec::new();
        self.array(|s| {
            let (mut key, mut value) = (None, None);
            s.object(|s, k| match k {
                "key" => {
                    first(&key)?;
                    key = Some(s.string()?);
                    Some(())
                }
                "value" => {
                    first(&value)?;
                    // After its key, a dropped attribute's value is only checked.
                    s.dropped = key.is_some_and(|k| !read(k));
                    let v = if s.null()? {
                        None
                    } else {
                        Some(s.any_value()?)
                    };
                    s.dropped = false;
                    value = Some(v);
                    Some(())
                }
                _ => s.skip(),
            })?;
            // No key is serde's "missing field" error.
            let key = key?;
            if read(key) {
                kept.push(KeyValueJson {
                    key: Cow::Borrowed(key),
                    value: value.flatten(),
                });
            }
            Some(())
        })?;
        Some(kept)
    }

    fn any_value(&mut self) -> Fallback<AnyValueJson<'a>> {
        let (mut string_value, mut int_value, mut double_value) = (None, None, None);
        let mut array_value = None;
        self.object(|s, key| match key {
            "stringValue" | "string_value" => s.scalar_field(&mut string_value),
            // A oneof: a bool shares the integer's slot (see `AnyValueJson::int_value`).
            "intValue" | "int_value" | "boolValue" | "bool_value" => s.scalar_field(&mut int_value),
            "doubleValue" | "double_value" => s.scalar_field(&mut double_value),
            "arrayValue" | "array_value" => {
                first(&array_value)?;
                array_value = Some(if s.null()? {
                    None
                } else {
                    Some(s.array_value()?)
                });
                Some(())
            }
            _ => s.skip(),
        })?;
        Some(AnyValueJson {
            string_value: string_value.flatten(),
            int_value: int_value.flatten(),
            double_value: double_value.flatten(),
            array_value: array_value.flatten(),
        })
    }

    fn array_value(&mut self) -> Fallback<ArrayValueJson<'a>> {
        let mut values = None;
        self.object(|s, key| match key {
            "values" => {
                first(&values)?;
                let mut all = Vec::new();
                s.array(|s| {
                    all.push(s.any_value()?);
                    Some(())
                })?;
                values = Some(all);
                Some(())
            }
            _ => s.skip(),
        })?;
        Some(ArrayValueJson {
            values: values.unwrap_or_default(),
        })
    }
}
