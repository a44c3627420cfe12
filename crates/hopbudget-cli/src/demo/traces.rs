//! The demo's hops as OTLP JSON traces (`ExportTraceServiceRequest` in its JSON mapping), one
//! trace per client request and one span per hop, with the `deadline.*` attributes of
//! `hopbudget::observe` (C14), for `hopbudget audit` and any OTLP tool.
//!
//! This is a small writer over the demo's own collector. The `obs` branch's file exporter
//! (tracing spans to OTLP JSON) is meant to replace it once it lands.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tokio::time::Instant;

use super::collector::SpanRec;
use super::topology::Topology;

fn trace_id(id: u64) -> String {
    format!("{:016x}{id:016x}", 0x686f_7062_7564_6765u64)
}

fn span_id(id: u64, service: usize) -> String {
    format!("{:08x}{:08x}", id as u32, service as u32 + 1)
}

/// The OTLP JSON document for `spans` of one run. `anchor` pairs a monotonic instant with
/// the wall-clock time it corresponds to.
pub fn otlp_json(
    topo: &Topology,
    spans: &[SpanRec],
    mode: &str,
    anchor: (Instant, SystemTime),
) -> Value {
    let to_nanos = |t: Instant| -> String {
        let wall = if t >= anchor.0 {
            anchor.1 + (t - anchor.0)
        } else {
            anchor.1 - (anchor.0 - t)
        };
        wall.duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
            .to_string()
    };
    let mut by_service: HashMap<usize, Vec<Value>> = HashMap::new();
    for s in spans {
        let name = &topo.services[s.service].name;
        let parent = topo
            .caller_of(name)
            .and_then(|c| topo.index_of(&c.name))
            .map(|p| span_id(s.id, p))
            .unwrap_or_default();
        let mut attrs = vec![
            json!({"key": "deadline.outcome", "value": {"stringValue": s.outcome.as_str()}}),
            json!({"key": "demo.request_id", "value": {"intValue": s.id.to_string()}}),
            json!({"key": "demo.mode", "value": {"stringValue": mode}}),
        ];
        match s.remaining_ms {
            Some(ms) => {
                attrs.push(
                    json!({"key": "deadline.remaining_ms", "value": {"intValue": ms.to_string()}}),
                );
            }
            None => {
                attrs.push(json!({"key": "deadline.source", "value": {"stringValue": "none"}}));
            }
        }
        let protocol = topo.services[s.service].protocol.as_str();
        attrs.push(json!({"key": "hop.protocol", "value": {"stringValue": protocol}}));
        by_service.entry(s.service).or_default().push(json!({
            "traceId": trace_id(s.id),
            "spanId": span_id(s.id, s.service),
            "parentSpanId": parent,
            "name": format!("{name} {protocol}"),
            "kind": 2,
            "startTimeUnixNano": to_nanos(s.start),
            "endTimeUnixNano": to_nanos(s.end),
            "attributes": attrs,
            "status": {"code": if s.outcome == hopbudget::Outcome::Completed { 1 } else { 2 }},
        }));
    }
    let mut services: Vec<_> = by_service.into_iter().collect();
    services.sort_by_key(|(i, _)| *i);
    json!({
        "resourceSpans": services.into_iter().map(|(i, spans)| json!({
            "resource": {"attributes": [
                {"key": "service.name", "value": {"stringValue": topo.services[i].name}}
            ]},
            "scopeSpans": [{"scope": {"name": "hopbudget-demo"}, "spans": spans}],
        })).collect::<Vec<_>>()
    })
}
