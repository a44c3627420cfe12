//! Reading OTLP JSON trace files one line at a time: the file the demo writes, what
//! `hopbudget::observe::otlp` writes, and what an OpenTelemetry Collector's `file` exporter
//! writes (one `ExportTraceServiceRequest` per line, in the protobuf JSON mapping), plain or
//! gzip-compressed (detected from the first bytes, not the name).
//!
//! Nothing here trusts the input: a line that is not JSON, a span without a valid id, a
//! truncated gzip stream or a line past the length cap each become a [`Problem`] naming the
//! file, the line and the reason, and reading goes on with the next line (or the next file).
//! Memory is bounded by the longest line accepted (`max_line_bytes`) and what its spans decode
//! to; each span is handed on as soon as its line is decoded.

use std::borrow::Cow;
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

use hopbudget::observe::fields;
use serde::Deserialize;
use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::span::{HopAttrs, Interner, Outcome, Span, parse_hex_id};
use super::{Problem, Problems};

/// Where decoded spans go, line by line.
pub(crate) trait SpanSink {
    /// The names table spans are interned in.
    fn names(&mut self) -> &mut Interner;
    /// One span.
    fn span(&mut self, span: Span);
    /// A line (one export batch) has been read in full: a good moment to finish traces.
    fn line_end(&mut self);
}

/// Counts of what was read.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct InputStats {
    /// Files opened.
    pub files: u64,
    /// Non-empty lines read.
    pub lines: u64,
    /// Lines that could not be decoded (each is a problem).
    pub bad_lines: u64,
    /// Spans decoded.
    pub spans: u64,
    /// Spans skipped because a field was missing or invalid (each is a problem).
    pub bad_spans: u64,
}

/// What the reader needs to know.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReadLimits {
    pub(crate) max_line_bytes: usize,
}

/// Read `path` (`-` is standard input) and hand every span to `sink`.
pub(crate) fn read_path(
    path: &Path,
    limits: ReadLimits,
    sink: &mut dyn SpanSink,
    stats: &mut InputStats,
    problems: &mut Problems,
) {
    let label = path.display().to_string();
    let raw: Box<dyn Read> = if label == "-" {
        Box::new(io::stdin().lock())
    } else {
        match File::open(path) {
            Ok(f) => Box::new(f),
            Err(e) => {
                problems.push(Problem::new(&label, None, format!("cannot open: {e}")));
                return;
            }
        }
    };
    read_stream(raw, &label, limits, sink, stats, problems);
}

/// Read one input stream (plain or gzip, detected from its first bytes); `label` names it
/// in problems.
pub(crate) fn read_stream(
    raw: Box<dyn Read + '_>,
    label: &str,
    limits: ReadLimits,
    sink: &mut dyn SpanSink,
    stats: &mut InputStats,
    problems: &mut Problems,
) {
    stats.files += 1;
    let mut buffered = BufReader::with_capacity(256 * 1024, raw);
    let head = match buffered.fill_buf() {
        Ok(b) => b.get(..4).unwrap_or(b).to_vec(),
        Err(e) => {
            problems.push(Problem::new(label, None, format!("cannot read: {e}")));
            return;
        }
    };
    if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        problems.push(Problem::new(
            label,
            None,
            "zstd-compressed (the Collector's `compression: zstd`): decompress it first, \
             e.g. `zstd -dc FILE | hopbudget audit -`"
                .to_owned(),
        ));
        return;
    }
    let mut reader: Box<dyn BufRead + '_> = if head.starts_with(&[0x1f, 0x8b]) {
        // A file exporter may append gzip members one after the other: read them all.
        Box::new(BufReader::with_capacity(
            256 * 1024,
            flate2::read::MultiGzDecoder::new(buffered),
        ))
    } else {
        Box::new(buffered)
    };
    read_lines(&mut reader, label, limits, sink, stats, problems);
}

/// Read lines from `reader`; `label` names it in problems.
pub(crate) fn read_lines(
    reader: &mut dyn BufRead,
    label: &str,
    limits: ReadLimits,
    sink: &mut dyn SpanSink,
    stats: &mut InputStats,
    problems: &mut Problems,
) {
    let mut line = Vec::new();
    let mut number = 0u64;
    loop {
        number += 1;
        line.clear();
        match read_capped_line(reader, &mut line, limits.max_line_bytes) {
            Ok(LineRead::Eof) => break,
            Ok(LineRead::TooLong) => {
                stats.lines += 1;
                stats.bad_lines += 1;
                problems.push(Problem::new(
                    label,
                    Some(number),
                    format!(
                        "line longer than {} bytes: skipped (raise --max-line-bytes)",
                        limits.max_line_bytes
                    ),
                ));
            }
            Ok(LineRead::Line { ended }) => {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                stats.lines += 1;
                if let Err(reason) = decode_line(&line, label, number, sink, stats, problems) {
                    stats.bad_lines += 1;
                    let reason = if ended {
                        reason
                    } else {
                        format!("{reason} (the file ends inside this line: truncated?)")
                    };
                    problems.push(Problem::new(label, Some(number), reason));
                }
                sink.line_end();
                if !ended {
                    break;
                }
            }
            Err(e) => {
                let reason = if e.kind() == io::ErrorKind::UnexpectedEof {
                    format!("input ends early (truncated compressed stream?): {e}")
                } else {
                    format!("read error: {e}")
                };
                problems.push(Problem::new(label, Some(number), reason));
                break;
            }
        }
    }
}

enum LineRead {
    Eof,
    /// A line; `ended` is false when the input stopped before its newline.
    Line {
        ended: bool,
    },
    TooLong,
}

/// Read up to and excluding the next `\n`, keeping at most `max` bytes; a longer line is
/// consumed and reported as [`LineRead::TooLong`].
fn read_capped_line(r: &mut dyn BufRead, out: &mut Vec<u8>, max: usize) -> io::Result<LineRead> {
    let mut too_long = false;
    let mut any = false;
    loop {
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(if too_long {
                LineRead::TooLong
            } else if any {
                LineRead::Line { ended: false }
            } else {
                LineRead::Eof
            });
        }
        any = true;
        let (chunk, found) = match memchr(b'\n', buf) {
            Some(i) => (&buf[..i], Some(i)),
            None => (buf, None),
        };
        if !too_long {
            if out.len() + chunk.len() > max {
                too_long = true;
                out.clear();
            } else {
                out.extend_from_slice(chunk);
            }
        }
        let used = found.map_or(buf.len(), |i| i + 1);
        r.consume(used);
        if found.is_some() {
            return Ok(if too_long {
                LineRead::TooLong
            } else {
                LineRead::Line { ended: true }
            });
        }
    }
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|&b| b == needle)
}

fn decode_line(
    line: &[u8],
    label: &str,
    number: u64,
    sink: &mut dyn SpanSink,
    stats: &mut InputStats,
    problems: &mut Problems,
) -> Result<(), String> {
    let request: RequestJson<'_> =
        serde_json::from_slice(line).map_err(|e| format!("not an OTLP JSON trace request: {e}"))?;
    let mut index = 0u64;
    for rs in request.resource_spans {
        let resource_service = rs
            .resource
            .as_ref()
            .and_then(|r| r.attributes.iter().find(|kv| kv.key == fields::SERVICE))
            .and_then(|kv| kv.value.as_ref()?.as_str().map(str::to_owned));
        for ss in rs.scope_spans {
            for span in ss.spans {
                index += 1;
                match convert(span, resource_service.as_deref(), sink.names()) {
                    Ok(s) => {
                        stats.spans += 1;
                        sink.span(s);
                    }
                    Err(reason) => {
                        stats.bad_spans += 1;
                        problems.push(Problem::new(
                            label,
                            Some(number),
                            format!("span {index}: {reason}; span skipped"),
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

fn convert(
    span: SpanJson<'_>,
    service: Option<&str>,
    names: &mut Interner,
) -> Result<Span, String> {
    let trace = match &span.trace_id {
        Some(Scalar::Str(s)) => parse_hex_id(s, 16).map_err(|e| format!("traceId: {e}"))?,
        _ => return Err("no traceId".into()),
    };
    if trace == 0 {
        return Err("traceId is all zeros".into());
    }
    let id = match &span.span_id {
        Some(Scalar::Str(s)) => parse_hex_id(s, 8).map_err(|e| format!("spanId: {e}"))? as u64,
        _ => return Err("no spanId".into()),
    };
    if id == 0 {
        return Err("spanId is all zeros".into());
    }
    let parent = match &span.parent_span_id {
        None | Some(Scalar::Null) => 0,
        Some(Scalar::Str(s)) if s.is_empty() => 0,
        Some(Scalar::Str(s)) => {
            parse_hex_id(s, 8).map_err(|e| format!("parentSpanId: {e}"))? as u64
        }
        Some(_) => return Err("parentSpanId is not a string".into()),
    };
    let start_ns = span
        .start_time_unix_nano
        .as_ref()
        .and_then(Scalar::as_u64)
        .ok_or("no valid startTimeUnixNano")?;
    let end_ns = span
        .end_time_unix_nano
        .as_ref()
        .and_then(Scalar::as_u64)
        .ok_or("no valid endTimeUnixNano")?;
    let kind = match &span.kind {
        Some(Scalar::Str(s)) => match s.as_ref() {
            "SPAN_KIND_INTERNAL" => 1,
            "SPAN_KIND_SERVER" => 2,
            "SPAN_KIND_CLIENT" => 3,
            "SPAN_KIND_PRODUCER" => 4,
            "SPAN_KIND_CONSUMER" => 5,
            _ => 0,
        },
        Some(k) => k.as_i64().and_then(|k| u8::try_from(k).ok()).unwrap_or(0),
        None => 0,
    };
    let mut service = service.map(|s| names.intern(s));
    let mut hop = HopAttrs {
        remaining_ms: None,
        source: None,
        margin_ms: None,
        outcome: Outcome::Unknown,
        required_ms: None,
        overrun_ms: None,
    };
    let mut is_hop = false;
    for kv in &span.attributes {
        let Some(v) = kv.value.as_ref() else { continue };
        match kv.key.as_ref() {
            fields::SERVICE => {
                if let Some(s) = v.as_str() {
                    service = Some(names.intern(s));
                }
            }
            // Not a hop by itself: a `degrade` or `cache.read` span inside a hop has it too.
            fields::REMAINING_MS => hop.remaining_ms = v.as_i64(),
            fields::SOURCE => {
                is_hop = true;
                hop.source = v.as_str().map(|s| names.intern(s));
            }
            fields::MARGIN_MS => hop.margin_ms = v.as_i64(),
            fields::OUTCOME => {
                is_hop = true;
                hop.outcome = v.as_str().map_or(Outcome::Unknown, Outcome::parse);
            }
            fields::REQUIRED_MS => hop.required_ms = v.as_i64(),
            fields::OVERRUN_MS => hop.overrun_ms = v.as_i64(),
            _ => {}
        }
    }
    let name = names.intern(span.name.as_ref().and_then(Scalar::as_str).unwrap_or(""));
    Ok(Span {
        trace,
        id,
        parent,
        service: service.unwrap_or_else(|| names.intern("(unknown service)")),
        name,
        kind,
        start_ns,
        end_ns,
        hop: is_hop.then_some(hop),
    })
}

// The OTLP JSON shapes, as lenient as the protobuf JSON mapping allows: unknown fields are
// ignored, numbers may be strings or numbers, strings are borrowed from the line when they
// hold no escapes.

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequestJson<'a> {
    #[serde(default, borrow, alias = "resource_spans")]
    resource_spans: Vec<ResourceSpansJson<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResourceSpansJson<'a> {
    #[serde(default, borrow)]
    resource: Option<ResourceJson<'a>>,
    #[serde(
        default,
        borrow,
        alias = "scope_spans",
        alias = "instrumentationLibrarySpans"
    )]
    scope_spans: Vec<ScopeSpansJson<'a>>,
}

#[derive(Deserialize)]
struct ResourceJson<'a> {
    #[serde(default, borrow)]
    attributes: Vec<KeyValueJson<'a>>,
}

#[derive(Deserialize)]
struct ScopeSpansJson<'a> {
    #[serde(default, borrow)]
    spans: Vec<SpanJson<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpanJson<'a> {
    #[serde(default, borrow, alias = "trace_id")]
    trace_id: Option<Scalar<'a>>,
    #[serde(default, borrow, alias = "span_id")]
    span_id: Option<Scalar<'a>>,
    #[serde(default, borrow, alias = "parent_span_id")]
    parent_span_id: Option<Scalar<'a>>,
    #[serde(default, borrow)]
    name: Option<Scalar<'a>>,
    #[serde(default, borrow)]
    kind: Option<Scalar<'a>>,
    #[serde(default, borrow, alias = "start_time_unix_nano")]
    start_time_unix_nano: Option<Scalar<'a>>,
    #[serde(default, borrow, alias = "end_time_unix_nano")]
    end_time_unix_nano: Option<Scalar<'a>>,
    #[serde(default, borrow)]
    attributes: Vec<KeyValueJson<'a>>,
}

#[derive(Deserialize)]
struct KeyValueJson<'a> {
    #[serde(borrow)]
    key: Cow<'a, str>,
    #[serde(default, borrow)]
    value: Option<AnyValueJson<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AnyValueJson<'a> {
    #[serde(default, borrow, alias = "string_value")]
    string_value: Option<Scalar<'a>>,
    #[serde(default, borrow, alias = "int_value")]
    int_value: Option<Scalar<'a>>,
    #[serde(default, borrow, alias = "double_value")]
    double_value: Option<Scalar<'a>>,
}

impl AnyValueJson<'_> {
    fn as_str(&self) -> Option<&str> {
        self.string_value.as_ref()?.as_str()
    }

    fn as_i64(&self) -> Option<i64> {
        [&self.int_value, &self.double_value, &self.string_value]
            .into_iter()
            .find_map(|v| v.as_ref()?.as_i64())
    }
}

/// Any JSON scalar; arrays and objects are skipped as [`Scalar::Other`].
enum Scalar<'a> {
    Str(Cow<'a, str>),
    Int(i64),
    UInt(u64),
    Float(f64),
    Null,
    Other,
}

impl Scalar<'_> {
    fn as_str(&self) -> Option<&str> {
        match self {
            Scalar::Str(s) => Some(s),
            _ => None,
        }
    }

    fn as_i64(&self) -> Option<i64> {
        match self {
            Scalar::Int(i) => Some(*i),
            Scalar::UInt(u) => i64::try_from(*u).ok(),
            Scalar::Float(f) if f.is_finite() && f.abs() < 9.0e18 => Some(f.round() as i64),
            Scalar::Str(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    fn as_u64(&self) -> Option<u64> {
        match self {
            Scalar::Int(i) => u64::try_from(*i).ok(),
            Scalar::UInt(u) => Some(*u),
            Scalar::Str(s) => s.trim().parse().ok(),
            _ => None,
        }
    }
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
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Scalar::Other)
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

#[cfg(test)]
mod tests {
    use super::*;

    struct Collect(Vec<Span>, u64, Interner);
    impl SpanSink for Collect {
        fn names(&mut self) -> &mut Interner {
            &mut self.2
        }
        fn span(&mut self, span: Span) {
            self.0.push(span);
        }
        fn line_end(&mut self) {
            self.1 += 1;
        }
    }

    fn read(text: &[u8], max: usize) -> (Collect, Problems, Interner) {
        let mut sink = Collect(Vec::new(), 0, Interner::new(100));
        let mut stats = InputStats::default();
        let mut problems = Problems::new(100);
        read_lines(
            &mut &text[..],
            "t.jsonl",
            ReadLimits {
                max_line_bytes: max,
            },
            &mut sink,
            &mut stats,
            &mut problems,
        );
        let names = std::mem::replace(&mut sink.2, Interner::new(1));
        (sink, problems, names)
    }

    const GOOD: &str = r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"tax"}}]},"scopeSpans":[{"spans":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0000000000000002","parentSpanId":"0000000000000001","name":"/tax","kind":"SPAN_KIND_SERVER","startTimeUnixNano":"1000000000","endTimeUnixNano":1005000000,"attributes":[{"key":"deadline.remaining_ms","value":{"intValue":"120"}},{"key":"deadline.source","value":{"stringValue":"epoch-ms"}},{"key":"deadline.outcome","value":{"stringValue":"refused"}},{"key":"deadline.required_ms","value":{"intValue":200}}]}]}]}]}"#;

    #[test]
    fn decodes_a_hop_span() {
        let (sink, problems, names) = read(GOOD.as_bytes(), 1 << 20);
        assert_eq!(problems.total, 0, "{:?}", problems.shown);
        let s = sink.0[0];
        assert_eq!(s.trace, 0x0102030405060708090a0b0c0d0e0f10);
        assert_eq!((s.id, s.parent, s.kind), (2, 1, 2));
        assert_eq!(names.name(s.service), "tax");
        assert_eq!(s.duration_ms(), 5);
        let hop = s.hop.unwrap();
        assert_eq!(hop.remaining_ms, Some(120));
        assert_eq!(hop.required_ms, Some(200));
        assert_eq!(hop.outcome, Outcome::Refused);
        assert_eq!(names.name(hop.source.unwrap()), "epoch-ms");
    }

    #[test]
    fn a_span_with_only_a_remaining_budget_is_not_a_hop() {
        // The library's `degrade` span (inside reco-scorer's hop) records the budget left
        // when it chose, but it is not a hop of its own.
        let degrade = GOOD
            .replace(
                r#"{"key":"deadline.source","value":{"stringValue":"epoch-ms"}},{"key":"deadline.outcome","value":{"stringValue":"refused"}},"#,
                r#"{"key":"degrade.choice","value":{"stringValue":"cheap"}},"#,
            )
            .replace(r#""name":"/tax""#, r#""name":"degrade""#);
        assert_ne!(degrade, GOOD);
        let (sink, problems, _) = read(degrade.as_bytes(), 1 << 20);
        assert_eq!(problems.total, 0, "{:?}", problems.shown);
        assert!(sink.0[0].hop.is_none());
    }

    #[test]
    fn bad_lines_and_spans_are_reported_and_reading_goes_on() {
        let bad_span = GOOD.replace("\"0000000000000002\"", "\"xyz\"");
        let text = format!("not json\n{bad_span}\n{GOOD}\n{}", &GOOD[..40]);
        let (sink, problems, _) = read(text.as_bytes(), 1 << 20);
        assert_eq!(sink.0.len(), 1);
        let reasons: Vec<String> = problems.shown.iter().map(ToString::to_string).collect();
        assert_eq!(problems.total, 3, "{reasons:?}");
        assert!(
            reasons[0].starts_with("t.jsonl:1: not an OTLP JSON"),
            "{reasons:?}"
        );
        assert!(
            reasons[1].contains("t.jsonl:2: span 1: spanId"),
            "{reasons:?}"
        );
        assert!(
            reasons[2].contains("t.jsonl:4:") && reasons[2].contains("truncated"),
            "{reasons:?}"
        );
    }

    #[test]
    fn an_overlong_line_is_skipped_not_buffered() {
        let text = format!("{GOOD}\n{GOOD}\n");
        let (sink, problems, _) = read(text.as_bytes(), GOOD.len() - 1);
        assert!(sink.0.is_empty());
        assert_eq!(problems.total, 2);
        assert!(problems.shown[0].to_string().contains("longer than"));
    }
}
