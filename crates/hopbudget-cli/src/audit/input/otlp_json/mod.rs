//! One line of OTLP JSON (an `ExportTraceServiceRequest` in the protobuf JSON mapping) into
//! spans: borrowed JSON shapes that skip what the audit does not read, every id and number
//! checked, a span that cannot be used reported and skipped. The shapes are `shapes.rs`;
//! reading a line into them is the scanner's (`scan.rs`), else serde_json's.

use hopbudget::observe::fields;

use super::attributes::{AttrValue, SpanHead, SpanReading};
use super::sink::{InputStats, SpanSink};
use crate::audit::problem::{Problem, Problems};
use crate::audit::span::{Interner, Span, parse_base64_id, parse_hex_id};
use shapes::{RequestJson, Scalar, SpanJson};

mod scan;
mod shapes;

pub(super) fn decode_line(
    line: &[u8],
    label: &str,
    number: u64,
    sink: &mut dyn SpanSink,
    stats: &mut InputStats,
    problems: &mut Problems,
) -> Result<(), String> {
    let request = parse(line, Reader::Scan)?;
    audit_request(request, label, number, sink, stats, problems);
    Ok(())
}

/// How a line is read: by the scanner (falling back to serde_json), or by serde_json alone
/// (the tests' reference).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reader {
    Scan,
    #[cfg(test)]
    Serde,
}

fn parse(line: &[u8], reader: Reader) -> Result<RequestJson<'_>, String> {
    // One UTF-8 check of the whole line (fast on ASCII) lets serde_json skip its own check of
    // every string; a line that is not UTF-8 goes through `from_slice` for the same error.
    let parsed = match std::str::from_utf8(line) {
        Ok(text) => {
            if reader == Reader::Scan
                && let Some(request) = scan::request(text)
            {
                return Ok(request);
            }
            serde_json::from_str(text)
        }
        Err(_) => serde_json::from_slice(line),
    };
    parsed.map_err(|e| format!("not an OTLP JSON trace request: {e}"))
}

fn audit_request(
    request: RequestJson<'_>,
    label: &str,
    number: u64,
    sink: &mut dyn SpanSink,
    stats: &mut InputStats,
    problems: &mut Problems,
) {
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
                    Ok((s, base64)) => {
                        stats.spans += 1;
                        stats.base64_ids += u64::from(base64);
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
}

/// A hex id, or failing that a base64 one (what the generic protobuf JSON mapping writes);
/// the flag says it was base64.
fn parse_id(s: &str, bytes: usize, what: &str, base64: &mut bool) -> Result<u128, String> {
    match parse_hex_id(s, bytes) {
        Ok(v) => Ok(v),
        Err(e) => match parse_base64_id(s, bytes) {
            Some(v) => {
                *base64 = true;
                Ok(v)
            }
            None => Err(format!("{what}: {e}")),
        },
    }
}

/// The span, and whether its ids were base64.
fn convert(
    span: SpanJson<'_>,
    service: Option<&str>,
    names: &mut Interner,
) -> Result<(Span, bool), String> {
    let mut base64 = false;
    let trace = match &span.trace_id {
        Some(Scalar::Str(s)) => parse_id(s, 16, "traceId", &mut base64)?,
        _ => return Err("no traceId".into()),
    };
    if trace == 0 {
        return Err("traceId is all zeros".into());
    }
    let id = match &span.span_id {
        Some(Scalar::Str(s)) => parse_id(s, 8, "spanId", &mut base64)? as u64,
        _ => return Err("no spanId".into()),
    };
    if id == 0 {
        return Err("spanId is all zeros".into());
    }
    let parent = match &span.parent_span_id {
        None | Some(Scalar::Null) => 0,
        Some(Scalar::Str(s)) if s.is_empty() => 0,
        Some(Scalar::Str(s)) => parse_id(s, 8, "parentSpanId", &mut base64)? as u64,
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
    let mut reading = SpanReading::new(service.map(|s| names.intern(s)));
    if let Some(code) = span.status.as_ref().and_then(|s| s.code.as_ref()) {
        reading.status_code(match code {
            Scalar::Str(s) if s.as_ref() == "STATUS_CODE_OK" => 1,
            Scalar::Str(s) if s.as_ref() == "STATUS_CODE_ERROR" => 2,
            c => c.as_i64().unwrap_or(0),
        });
    }
    for event in &span.events {
        if event.name.as_ref().and_then(Scalar::as_str) != Some("exception") {
            continue;
        }
        for kv in &event.attributes {
            if kv.key == "exception.type"
                && let Some(t) = kv.value.as_ref().and_then(AttrValue::as_str)
            {
                reading.exception_type(t);
            }
        }
    }
    for kv in &span.attributes {
        reading.attribute(&kv.key, kv.value.as_ref(), names);
    }
    let head = SpanHead {
        trace,
        id,
        parent,
        name: names.intern(span.name.as_ref().and_then(Scalar::as_str).unwrap_or("")),
        kind,
        start_ns,
        end_ns,
    };
    Ok((reading.finish(head, names), base64))
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::io::Read;
    use std::path::Path;

    use proptest::prelude::*;

    use super::*;
    use crate::audit::generate;

    use crate::audit::input::sink::Collect;

    /// Everything decoding `line` yields (spans, names in the order interned, counts,
    /// problems, the line's error), as text to compare.
    fn decoded(line: &[u8], reader: Reader) -> String {
        let mut sink = Collect(Vec::new(), 0, Interner::new(1_000));
        let mut stats = InputStats::default();
        let mut problems = Problems::new(usize::MAX);
        let read = parse(line, reader).map(|request| {
            audit_request(request, "t.jsonl", 7, &mut sink, &mut stats, &mut problems);
        });
        let names: Vec<&str> = sink.2.all().collect();
        let problems: Vec<String> = problems.shown.iter().map(ToString::to_string).collect();
        format!("{read:?}\n{:?}\n{names:?}\n{stats:?}\n{problems:?}", sink.0)
    }

    fn fixture_lines(name: &str) -> Vec<Vec<u8>> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/otel-python")
            .join(name);
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut text = Vec::new();
        flate2::read::MultiGzDecoder::new(file)
            .read_to_end(&mut text)
            .expect("fixture inflates");
        lines(&text)
    }

    fn lines(text: &[u8]) -> Vec<Vec<u8>> {
        text.split(|&b| b == b'\n')
            .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
            .map(<[u8]>::to_vec)
            .collect()
    }

    fn generated(spans: u64) -> Vec<Vec<u8>> {
        let mut text = Vec::new();
        generate::write(&mut text, spans, Some("warehouse-router"), 5).expect("generated");
        lines(&text)
    }

    /// Every line of the fixtures and of a generated file: the scanner reads it (no
    /// fallback) and yields exactly what serde_json's shapes yield.
    #[test]
    fn scanner_decodes_every_fixture_line_as_serde_does() {
        let mut all = fixture_lines("plain-otel.jsonl.gz");
        all.extend(fixture_lines("plain-otel-base64ids.jsonl.gz"));
        all.extend(generated(6_000));
        assert!(all.len() > 20, "{} lines", all.len());
        for (i, line) in all.iter().enumerate() {
            let text = std::str::from_utf8(line).expect("UTF-8");
            assert!(scan::request(text).is_some(), "line {i} fell back: {text}");
            assert_eq!(
                decoded(line, Reader::Scan),
                decoded(line, Reader::Serde),
                "line {i}: {text}"
            );
        }
    }

    /// A line with every shape the scanner reads: resource, scope, status, events, a
    /// captured header (an array), numbers and strings, attributes it keeps and drops.
    const LINE: &str = r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"host.name","value":{"stringValue":"h1"}},{"key":"service.name","value":{"stringValue":"tax"}}],"droppedAttributesCount":0},"scopeSpans":[{"scope":{"name":"flask","version":"1.0"},"spans":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0000000000000002","parentSpanId":"0000000000000001","flags":256,"name":"GET /tax","kind":2,"startTimeUnixNano":"1000000000","endTimeUnixNano":1005000000,"attributes":[{"key":"http.request.header.x_request_timeout_ms","value":{"arrayValue":{"values":[{"stringValue":"250"}]}}},{"key":"http.response.status_code","value":{"intValue":"504"}},{"key":"retry","value":{"boolValue":true}},{"key":"ratio","value":{"doubleValue":0.5}},{"key":"deadline.remaining_ms","value":{"intValue":120}},{"key":"deadline.source","value":{"stringValue":"epoch-ms"}}],"events":[{"name":"exception","timeUnixNano":"1004000000","attributes":[{"key":"exception.type","value":{"stringValue":"TimeoutError"}},{"key":"exception.message","value":{"stringValue":"read timed out"}}]}],"status":{"code":2,"message":"boom"}},{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0000000000000001","parentSpanId":"","name":"root","kind":"SPAN_KIND_SERVER","startTimeUnixNano":"999000000","endTimeUnixNano":"1006000000","status":{}}]}],"schemaUrl":"https://opentelemetry.io/schemas/1.21.0"}]}"#;

    #[test]
    fn the_sample_line_takes_the_scanner() {
        assert!(scan::request(LINE).is_some());
        let both = decoded(LINE.as_bytes(), Reader::Scan);
        assert_eq!(both, decoded(LINE.as_bytes(), Reader::Serde));
        assert!(
            both.contains("TimeoutError") || both.contains("tax"),
            "{both}"
        );
    }

    /// What a mutation inserts: escapes (which make the scanner fall back), numbers serde
    /// reads its own way, nulls, structure out of place.
    const INSERTS: [&str; 16] = [
        "\\\"", "\\\\", "\\u0041", "\\n", "\\/", "\\ud800", "\\u00e9", "\"", "null", "-1", "1.5",
        "1e3", "{}", "[]", ",", "\u{1}",
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// Whatever is done to a line (cut short, bytes flipped, escapes and odd values
        /// inserted), the scanner and serde_json yield the same: the same spans, or the
        /// same error.
        #[test]
        fn mutated_lines_decode_as_serde_does(
            edits in prop::collection::vec((0usize..3, any::<usize>(), any::<u8>(), 0..INSERTS.len()), 1..4)
        ) {
            let mut line = LINE.as_bytes().to_vec();
            for (op, at, byte, insert) in edits {
                let at = at % (line.len() + 1);
                match op {
                    0 => line.truncate(at),
                    1 => {
                        if let Some(b) = line.get_mut(at) {
                            *b ^= byte;
                        }
                    }
                    _ => {
                        line.splice(at..at, INSERTS[insert].bytes());
                    }
                }
            }
            prop_assert_eq!(decoded(&line, Reader::Scan), decoded(&line, Reader::Serde));
        }
    }

    #[test]
    fn numbers_in_strings_read_as_parse_reads_them() {
        fn s(v: &str) -> Scalar<'_> {
            Scalar::Str(Cow::Borrowed(v))
        }
        for v in [
            "0",
            "1765000000025000000",
            "9223372036854775807",
            "9223372036854775808",
            "18446744073709551615",
            "18446744073709551616",
            " 12 ",
            "+5",
            "-5",
            "1e3",
            "",
            "12a",
        ] {
            assert_eq!(s(v).as_u64(), v.trim().parse::<u64>().ok(), "{v:?}");
            assert_eq!(s(v).as_i64(), v.trim().parse::<i64>().ok(), "{v:?}");
        }
    }
}
