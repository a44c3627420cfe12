//! Copies of the Python SDK's spans (`fixtures/otel-python/plain-otel.jsonl.gz`) to edit in
//! a test: the real SDK's format, with one thing changed. Each test file uses a part.
#![allow(dead_code)]

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
