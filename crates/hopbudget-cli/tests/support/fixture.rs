//! Copies of the Python SDK's spans (`fixtures/otel-python/plain-otel.jsonl.gz`) to edit in
//! a test: the real SDK's format, with one thing changed; and the same spans split by trace,
//! as the Collector's Kafka exporter splits them. Each audit module uses a part.

use std::io::Read;
use std::path::PathBuf;

use serde_json::Value;

/// The fixture's export requests, one per line.
pub(crate) fn fixture_lines() -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/otel-python/plain-otel.jsonl.gz");
    let mut text = String::new();
    flate2::read::MultiGzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Every span of the file with its service, mutably.
pub(crate) fn spans_mut(lines: &mut [Value]) -> Vec<(String, &mut Value)> {
    let mut out = Vec::new();
    for line in lines {
        for rs in line["resourceSpans"].as_array_mut().unwrap() {
            let service = rs["resource"]["attributes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|a| a["key"] == "service.name")
                .unwrap()["value"]["stringValue"]
                .as_str()
                .unwrap()
                .to_owned();
            for ss in rs["scopeSpans"].as_array_mut().unwrap() {
                for s in ss["spans"].as_array_mut().unwrap() {
                    out.push((service.clone(), s));
                }
            }
        }
    }
    out
}

pub(crate) fn num(v: &Value) -> i128 {
    v.as_str().unwrap().parse().unwrap()
}

/// The lines as one OTLP JSON stream.
pub(crate) fn to_text(lines: &[Value]) -> String {
    lines.iter().map(|l| l.to_string() + "\n").collect()
}

/// The trace ids of an export request line, hex.
pub(crate) fn trace_of(span: &Value) -> String {
    span["traceId"].as_str().unwrap().to_owned()
}

/// Each export request split into one request per trace, as the Collector's Kafka exporter
/// with `partition_traces_by_id: true` writes it: (trace id, request).
pub(crate) fn per_trace(lines: &[Value]) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for line in lines {
        let mut ids: Vec<String> = Vec::new();
        for rs in line["resourceSpans"].as_array().unwrap() {
            for ss in rs["scopeSpans"].as_array().unwrap() {
                for s in ss["spans"].as_array().unwrap() {
                    let t = trace_of(s);
                    if !ids.contains(&t) {
                        ids.push(t);
                    }
                }
            }
        }
        for id in ids {
            let mut req = line.clone();
            for rs in req["resourceSpans"].as_array_mut().unwrap() {
                for ss in rs["scopeSpans"].as_array_mut().unwrap() {
                    ss["spans"]
                        .as_array_mut()
                        .unwrap()
                        .retain(|s| trace_of(s) == id);
                }
                rs["scopeSpans"]
                    .as_array_mut()
                    .unwrap()
                    .retain(|ss| !ss["spans"].as_array().unwrap().is_empty());
            }
            req["resourceSpans"]
                .as_array_mut()
                .unwrap()
                .retain(|rs| !rs["scopeSpans"].as_array().unwrap().is_empty());
            out.push((id, req));
        }
    }
    out
}
