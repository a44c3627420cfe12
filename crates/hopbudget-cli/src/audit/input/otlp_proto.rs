//! One OTLP protobuf `ExportTraceServiceRequest` (what an OpenTelemetry SDK's or Collector's
//! `otlphttp` exporter posts as `application/x-protobuf`) into spans: the same fields and the
//! same checks as the JSON decoder (`otlp_json.rs`), read from the prost messages of
//! `opentelemetry-proto`. A span that cannot be used is reported and skipped.

use hopbudget::observe::fields;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use opentelemetry_proto::tonic::trace::v1 as pb;
use prost::Message;

use super::sink::{InputStats, SpanSink};
use crate::audit::span::{HopAttrs, Interner, Outcome, Span, deadline_header, header_budget_ms};
use crate::audit::status::{self, Signals};
use crate::audit::{Problem, Problems};

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
                .and_then(|kv| as_str(kv.value.as_ref()?).map(str::to_owned))
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

fn as_str(v: &AnyValue) -> Option<&str> {
    match v.value.as_ref()? {
        any_value::Value::StringValue(s) => Some(s),
        _ => None,
    }
}

/// The string, or an array's first string (a captured header is an array).
fn first_str(v: &AnyValue) -> Option<&str> {
    match v.value.as_ref()? {
        any_value::Value::StringValue(s) => Some(s),
        any_value::Value::ArrayValue(a) => a.values.first().and_then(as_str),
        _ => None,
    }
}

fn as_i64(v: &AnyValue) -> Option<i64> {
    match v.value.as_ref()? {
        any_value::Value::IntValue(i) => Some(*i),
        any_value::Value::DoubleValue(f) if f.is_finite() && f.abs() < 9.0e18 => {
            Some(f.round() as i64)
        }
        any_value::Value::StringValue(s) => s.trim().parse().ok(),
        _ => None,
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
    let mut signals = Signals::default();
    let mut has_header = false;
    let mut header_ms = None;
    if let Some(st) = &span.status {
        signals.span_status(i64::from(st.code));
    }
    for event in span.events.iter().filter(|e| e.name == "exception") {
        for kv in &event.attributes {
            if kv.key == status::EXCEPTION_TYPE
                && let Some(t) = kv.value.as_ref().and_then(as_str)
            {
                signals.exception(t);
            }
        }
    }
    for kv in &span.attributes {
        if let Some(name) = deadline_header(&kv.key) {
            has_header = true;
            header_ms = header_ms.or_else(|| {
                kv.value
                    .as_ref()
                    .and_then(first_str)
                    .and_then(|v| header_budget_ms(name, v))
            });
            continue;
        }
        let Some(v) = kv.value.as_ref() else { continue };
        match kv.key.as_str() {
            key @ (status::GRPC_STATUS
            | status::HTTP_STATUS
            | status::HTTP_STATUS_OLD
            | status::EXCEPTION_TYPE) => signals.attribute(key, as_i64(v), as_str(v)),
            fields::SERVICE => {
                if let Some(s) = as_str(v) {
                    service = Some(names.intern(s));
                }
            }
            // Not a hop by itself: a `degrade` or `cache.read` span inside a hop has it too.
            fields::REMAINING_MS => hop.remaining_ms = as_i64(v),
            fields::SOURCE => {
                is_hop = true;
                hop.source = as_str(v).map(|s| names.intern(s));
            }
            fields::MARGIN_MS => hop.margin_ms = as_i64(v),
            fields::OUTCOME => {
                is_hop = true;
                hop.outcome = as_str(v).map_or(Outcome::Unknown, Outcome::parse);
            }
            fields::REQUIRED_MS => hop.required_ms = as_i64(v),
            fields::OVERRUN_MS => hop.overrun_ms = as_i64(v),
            _ => {}
        }
    }
    Ok(Span {
        trace,
        id: sid,
        parent,
        service: service.unwrap_or_else(|| names.intern("(unknown service)")),
        name: names.intern(&span.name),
        kind,
        start_ns: span.start_time_unix_nano,
        end_ns: span.end_time_unix_nano,
        hop: is_hop.then_some(hop),
        std: signals.outcome(),
        deadline_header: has_header,
        header_ms,
        own_timeout: signals.own_timeout(),
    })
}
