//! One OTLP protobuf `ExportTraceServiceRequest` (what an OpenTelemetry SDK's or Collector's
//! `otlphttp` exporter posts as `application/x-protobuf`) into spans: the same fields and the
//! same checks as the JSON decoder (`otlp_json/`), read from the prost messages of
//! `opentelemetry-proto`. A span that cannot be used is reported and skipped.

use hopbudget::observe::fields;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use opentelemetry_proto::tonic::trace::v1 as pb;
use prost::Message;

use super::attributes::{AttrValue, SpanHead, SpanReading};
use super::sink::{InputStats, SpanSink};
use crate::audit::problem::{Problem, Problems};
use crate::audit::span::{Interner, Span};
use crate::audit::status;

/// Decode one request body and hand its spans to `sink`; `label` and `number` name the
/// request in problems. `Err` when the body is not an OTLP protobuf trace request at all.
pub(crate) fn decode_request(
    body: &[u8],
    label: &str,
    number: u64,
    sink: &mut dyn SpanSink,
    stats: &mut InputStats,
    problems: &mut Problems,
) -> Result<(), String> {
    let request = ExportTraceServiceRequest::decode(body)
        .map_err(|e| format!("not an OTLP protobuf trace request: {e}"))?;
    let mut index = 0u64;
    for rs in request.resource_spans {
        let resource_service = rs.resource.as_ref().and_then(|r| {
            r.attributes
                .iter()
                .find(|kv| kv.key == fields::SERVICE)
                .and_then(|kv| kv.value.as_ref()?.as_str().map(str::to_owned))
        });
        for ss in rs.scope_spans {
            for span in ss.spans {
                index += 1;
                match convert(&span, resource_service.as_deref(), sink.names()) {
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

impl AttrValue for AnyValue {
    fn as_str(&self) -> Option<&str> {
        match self.value.as_ref()? {
            any_value::Value::StringValue(s) => Some(s),
            _ => None,
        }
    }

    fn as_i64(&self) -> Option<i64> {
        match self.value.as_ref()? {
            any_value::Value::IntValue(i) => Some(*i),
            any_value::Value::DoubleValue(f) if f.is_finite() && f.abs() < 9.0e18 => {
                Some(f.round() as i64)
            }
            any_value::Value::StringValue(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    fn first_str(&self) -> Option<&str> {
        match self.value.as_ref()? {
            any_value::Value::StringValue(s) => Some(s),
            any_value::Value::ArrayValue(a) => a.values.first().and_then(AttrValue::as_str),
            _ => None,
        }
    }

    fn as_bool(&self) -> Option<bool> {
        match self.value.as_ref()? {
            any_value::Value::BoolValue(b) => Some(*b),
            any_value::Value::StringValue(s) => s.parse().ok(),
            _ => None,
        }
    }
}

/// An id of exactly `bytes` bytes, big-endian (as its hex spelling reads).
fn id(raw: &[u8], bytes: usize, what: &str) -> Result<u128, String> {
    if raw.len() != bytes {
        return Err(format!("{what}: expected {bytes} bytes, got {}", raw.len()));
    }
    Ok(raw.iter().fold(0u128, |a, &b| (a << 8) | u128::from(b)))
}

fn convert(span: &pb::Span, service: Option<&str>, names: &mut Interner) -> Result<Span, String> {
    let trace = id(&span.trace_id, 16, "traceId")?;
    if trace == 0 {
        return Err("traceId is all zeros".into());
    }
    let sid = id(&span.span_id, 8, "spanId")? as u64;
    if sid == 0 {
        return Err("spanId is all zeros".into());
    }
    let parent = if span.parent_span_id.is_empty() {
        0
    } else {
        id(&span.parent_span_id, 8, "parentSpanId")? as u64
    };
    if span.start_time_unix_nano == 0 {
        return Err("no valid startTimeUnixNano".into());
    }
    if span.end_time_unix_nano == 0 {
        return Err("no valid endTimeUnixNano".into());
    }
    let kind = u8::try_from(span.kind).unwrap_or(0);
    let mut reading = SpanReading::new(service.map(|s| names.intern(s)));
    if let Some(st) = &span.status {
        reading.status_code(i64::from(st.code));
    }
    for event in span.events.iter().filter(|e| e.name == "exception") {
        for kv in &event.attributes {
            if kv.key == status::EXCEPTION_TYPE
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
        id: sid,
        parent,
        name: names.intern(&span.name),
        kind,
        start_ns: span.start_time_unix_nano,
        end_ns: span.end_time_unix_nano,
    };
    Ok(reading.finish(head, names))
}
