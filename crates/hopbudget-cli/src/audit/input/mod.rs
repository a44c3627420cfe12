//! Reading OTLP JSON trace files one line at a time: the file the demo writes, what
//! `hopbudget::observe::otlp` writes, and what an OpenTelemetry Collector's `file` exporter
//! writes (one `ExportTraceServiceRequest` per line, in the protobuf JSON mapping), plain or
//! gzip-compressed (detected from the first bytes, not the name).
//!
//! Nothing here trusts the input: a line that is not JSON, a span without a valid id, a
//! truncated gzip stream or a line past the length cap each become a [`Problem`] naming the
//! file, the line and the reason, and reading goes on with the next line (or the next file).
//! Memory is bounded by the longest line accepted (`max_line_bytes`) and what its spans decode
//! to; a file's lines are read on one thread and decoded on others in batches of about
//! 256 KiB, at most 1.5 MiB of them in flight (`batch.rs`), so memory stays bounded by a few
//! batches, or by twice the longest line when it is longer.
//!
//! Reading (files, gzip, lines and their cap) is here; decoding a line is `otlp_json/`;
//! batching lines for a decoding thread is `batch.rs`; what decoded spans are handed to is
//! `sink.rs`. An OTLP/HTTP export request's body
//! (`--listen`) is decoded whole by `read_request`, as JSON or protobuf (`otlp_proto.rs`).
//!
//! The other sources of spans are here too: the OTLP/HTTP receiver ([`listen`], `--listen`)
//! and the Kafka consumer (`kafka`, feature `kafka`), which hand each request to the audit
//! through `feed::Feed`.

mod attributes;
pub(crate) mod batch;
pub(crate) mod feed;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod listen;
mod otlp_json;
mod otlp_proto;
mod sink;

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

pub use sink::InputStats;
pub(crate) use sink::SpanSink;

use super::problem::{Problem, Problems};

/// What the reader needs to know.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReadLimits {
    pub(crate) max_line_bytes: usize,
}

/// How an OTLP/HTTP export request's body is encoded (its `Content-Type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// `application/json`: OTLP JSON.
    Json,
    /// `application/x-protobuf`.
    Protobuf,
}

/// Decode one export request's body (already decompressed), hand its spans to `sink` and
/// end the batch; `label` and `number` name the request in problems. `Err` (also recorded as
/// a problem) when the body is not a trace request at all; spans that cannot be used are
/// problems and skipped, as in a file.
pub(crate) fn read_request(
    body: &[u8],
    encoding: Encoding,
    label: &str,
    number: u64,
    sink: &mut dyn SpanSink,
    stats: &mut InputStats,
    problems: &mut Problems,
) -> Result<(), String> {
    stats.requests += 1;
    stats.lines += 1;
    let read = match encoding {
        Encoding::Json => otlp_json::decode_line(body, label, number, sink, stats, problems),
        Encoding::Protobuf => {
            otlp_proto::decode_request(body, label, number, sink, stats, problems)
        }
    };
    if let Err(e) = &read {
        stats.bad_lines += 1;
        problems.push(Problem::new(label, Some(number), e.clone()));
    }
    sink.line_end();
    read
}

/// Read `path` (`-` is standard input) and hand every line to `lines`.
pub(crate) fn read_path(path: &Path, limits: ReadLimits, lines: &mut dyn LineSink) {
    let label = path.display().to_string();
    let raw: Box<dyn Read> = if label == "-" {
        Box::new(io::stdin().lock())
    } else {
        match File::open(path) {
            Ok(f) => Box::new(f),
            Err(e) => {
                lines.problem(Problem::new(&label, None, format!("cannot open: {e}")));
                return;
            }
        }
    };
    read_stream(raw, &label, limits, lines);
}

/// Read one input stream (plain or gzip, detected from its first bytes); `label` names it
/// in problems.
pub(crate) fn read_stream(
    raw: Box<dyn Read + '_>,
    label: &str,
    limits: ReadLimits,
    lines: &mut dyn LineSink,
) {
    lines.file();
    let mut buffered = BufReader::with_capacity(256 * 1024, raw);
    let head = match buffered.fill_buf() {
        Ok(b) => b.get(..4).unwrap_or(b).to_vec(),
        Err(e) => {
            lines.problem(Problem::new(label, None, format!("cannot read: {e}")));
            return;
        }
    };
    if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        lines.problem(Problem::new(
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
    split_lines(&mut reader, label, limits, lines);
}

/// Where the line reader hands what it read, in input order: decoded on the spot
/// ([`LineDecoder`]) or batched for a decoding thread (`batch.rs`).
pub(crate) trait LineSink {
    /// An input stream was opened.
    fn file(&mut self);
    /// A line that is not blank; `ended` is false when the input stopped inside it.
    fn line(&mut self, label: &str, line: &[u8], number: u64, ended: bool);
    /// A line that could not be read (longer than the cap): a bad line, and why.
    fn bad_line(&mut self, problem: Problem);
    /// A problem with the stream itself (cannot open, read error).
    fn problem(&mut self, problem: Problem);
}

/// Decodes each line as it is read and hands its spans to `sink`.
pub(crate) struct LineDecoder<'a> {
    pub(crate) sink: &'a mut dyn SpanSink,
    pub(crate) stats: &'a mut InputStats,
    pub(crate) problems: &'a mut Problems,
}

impl LineSink for LineDecoder<'_> {
    fn file(&mut self) {
        self.stats.files += 1;
    }

    fn line(&mut self, label: &str, line: &[u8], number: u64, ended: bool) {
        self.stats.lines += 1;
        if let Err(reason) =
            otlp_json::decode_line(line, label, number, self.sink, self.stats, self.problems)
        {
            self.stats.bad_lines += 1;
            let reason = if ended {
                reason
            } else {
                format!("{reason} (the file ends inside this line: truncated?)")
            };
            self.problems
                .push(Problem::new(label, Some(number), reason));
        }
        self.sink.line_end();
    }

    fn bad_line(&mut self, problem: Problem) {
        self.stats.lines += 1;
        self.stats.bad_lines += 1;
        self.problems.push(problem);
    }

    fn problem(&mut self, problem: Problem) {
        self.problems.push(problem);
    }
}

/// Read lines from `reader` and decode them on this thread; `label` names it in problems.
#[cfg(test)]
pub(crate) fn read_lines(
    reader: &mut dyn BufRead,
    label: &str,
    limits: ReadLimits,
    sink: &mut dyn SpanSink,
    stats: &mut InputStats,
    problems: &mut Problems,
) {
    let mut lines = LineDecoder {
        sink,
        stats,
        problems,
    };
    split_lines(reader, label, limits, &mut lines);
}

/// Split what `reader` yields into lines for `lines`; `label` names it in problems.
fn split_lines(
    reader: &mut dyn BufRead,
    label: &str,
    limits: ReadLimits,
    lines: &mut dyn LineSink,
) {
    let mut line = Vec::new();
    let mut number = 0u64;
    loop {
        number += 1;
        line.clear();
        match read_capped_line(reader, &mut line, limits.max_line_bytes) {
            Ok(LineRead::Eof) => break,
            Ok(LineRead::TooLong) => {
                lines.bad_line(Problem::new(
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
                lines.line(label, &line, number, ended);
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
                lines.problem(Problem::new(label, Some(number), reason));
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

/// The vectorised search (a byte at a time cost about 6 instructions per byte read).
fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    memchr::memchr(needle, hay)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::span::{Interner, Outcome};

    use super::sink::Collect;

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

    /// A sidecar's egress span: `hopbudget.proxy`, `deadline.told_ms`, `deadline.matched` (a
    /// bool) and `server.address` decode once, the same from OTLP JSON (the scanner and
    /// serde_json) and from protobuf (`audit --listen`).
    #[test]
    fn decodes_a_sidecars_egress_span_from_json_and_protobuf() {
        use crate::audit::span::Proxy;
        use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
        use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
        use opentelemetry_proto::tonic::resource::v1::Resource;
        use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span as PbSpan};
        use prost::Message;

        let json = GOOD
            .replace(
                r#"{"key":"deadline.source","value":{"stringValue":"epoch-ms"}},"#,
                r#"{"key":"hopbudget.proxy","value":{"stringValue":"egress"}},{"key":"deadline.told_ms","value":{"intValue":"986"}},{"key":"deadline.matched","value":{"boolValue":false}},{"key":"server.address","value":{"stringValue":"orders"}},"#,
            )
            .replace("SPAN_KIND_SERVER", "SPAN_KIND_CLIENT");
        assert_ne!(json, GOOD);
        // A string the scanner gives up on (an escape) sends the line through serde_json.
        let slow = json.replace(r#""name":"/tax""#, r#""name":"\/tax""#);
        let kv = |key: &str, v: any_value::Value| KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(v) }),
            ..Default::default()
        };
        use any_value::Value::{BoolValue, IntValue, StringValue};
        let pb = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![kv("service.name", StringValue("tax".into()))],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    spans: vec![PbSpan {
                        trace_id: (1..=16).collect(),
                        span_id: vec![0, 0, 0, 0, 0, 0, 0, 2],
                        parent_span_id: vec![0, 0, 0, 0, 0, 0, 0, 1],
                        name: "/tax".into(),
                        kind: 3,
                        start_time_unix_nano: 1_000_000_000,
                        end_time_unix_nano: 1_005_000_000,
                        attributes: vec![
                            kv("deadline.remaining_ms", IntValue(120)),
                            kv("hopbudget.proxy", StringValue("egress".into())),
                            kv("deadline.told_ms", IntValue(986)),
                            kv("deadline.matched", BoolValue(false)),
                            kv("server.address", StringValue("orders".into())),
                            kv("deadline.outcome", StringValue("refused".into())),
                            kv("deadline.required_ms", IntValue(200)),
                        ],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
        .encode_to_vec();
        let mut decoded = Vec::new();
        for (body, encoding) in [
            (json.as_bytes(), Encoding::Json),
            (slow.as_bytes(), Encoding::Json),
            (&pb[..], Encoding::Protobuf),
        ] {
            let mut sink = Collect(Vec::new(), 0, Interner::new(100));
            let (mut stats, mut problems) = (InputStats::default(), Problems::new(10));
            read_request(body, encoding, "t", 1, &mut sink, &mut stats, &mut problems).unwrap();
            assert_eq!(problems.total, 0, "{:?}", problems.shown);
            let s = sink.0[0];
            assert_eq!(s.proxy, Proxy::Egress, "{encoding:?}");
            assert!(s.is_egress() && s.hop_attrs().is_none());
            let hop = s.hop.unwrap();
            assert_eq!((hop.told_ms, hop.matched), (Some(986), Some(false)));
            assert_eq!(sink.2.name(s.peer.unwrap()), "orders");
            decoded.push(s);
        }
        assert_eq!(decoded[0], decoded[1]);
        assert_eq!(decoded[0], decoded[2]);
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
