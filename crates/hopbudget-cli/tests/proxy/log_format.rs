//! `hopbudget proxy --log-format json` (issue #50 item 9): the lines on stderr as one JSON
//! object each, for a log pipeline, with the `hop ended` line carrying the same fields as in
//! the default text format, at the object's top level. A format it does not know is refused
//! at start, naming the ones it has.

use std::collections::BTreeMap;

use crate::support::proxy;
use crate::support::proxy::{Proxy, serve};
use axum::Router;
use serde_json::Value;

/// The keys every JSON line has besides the event's own fields.
const ENVELOPE: &[&str] = &["timestamp", "level", "target", "message"];

/// A `hop ended` line's fields, `name=value` after the message, values unquoted.
fn text_fields(line: &str) -> BTreeMap<String, String> {
    let (_, fields) = line
        .split_once("hop ended ")
        .unwrap_or_else(|| panic!("not a hop line: {line}"));
    fields
        .split(' ')
        .filter_map(|token| token.split_once('='))
        .filter(|(name, _)| {
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
        })
        .map(|(name, value)| (name.to_owned(), value.trim_matches('"').to_owned()))
        .collect()
}

/// A JSON line's fields, the envelope left out; strings unquoted, numbers as written.
fn json_fields(line: &str) -> BTreeMap<String, String> {
    let object: Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
    object
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {line}"))
        .iter()
        .filter(|(key, _)| !ENVELOPE.contains(&key.as_str()))
        .map(|(key, value)| {
            let value = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (key.clone(), value)
        })
        .collect()
}

/// The `hop ended` line a proxy in `format` (with `extra` arguments) writes for one request
/// with `budget` to a service that answers at once: refused below the route's 20 ms minimum,
/// answered above it.
async fn hop_line(format: &str, extra: &[&str], budget: &str) -> String {
    let service = serve(Router::new().fallback(|| async { "ok" })).await;
    let mut proxy = Proxy::start(
        service,
        Some("service: orders\nrefuse_below_ms: 20\n"),
        &[&["--log-format", format][..], extra].concat(),
    )
    .await;
    let answer = proxy::get(proxy.addr, "/quote", &[("x-request-timeout-ms", budget)])
        .await
        .unwrap();
    assert!(
        answer.status == 200 || answer.status == 503,
        "{}",
        answer.status
    );
    proxy.await_log(&["hop ended"]).await
}

#[tokio::test]
async fn the_hop_line_has_the_same_fields_in_json_as_in_text() {
    let _module = crate::support::serial::module(module_path!());
    // With `--otlp-endpoint` the lines are a layer beside the span exporter's: the same
    // fields there too. (Nothing listens at the endpoint; the spans are dropped.)
    let spans: &[&str] = &["--otlp-endpoint", "http://127.0.0.1:1/v1/traces"];
    for (budget, extra) in [("2000", &[][..]), ("5", &[][..]), ("2000", spans)] {
        let text = hop_line("text", extra, budget).await;
        let json = hop_line("json", extra, budget).await;
        let (text_fields, json_fields) = (text_fields(&text), json_fields(&json));
        eprintln!("text: {text}\njson: {json}");
        assert!(text_fields.len() >= 7, "{text}");
        assert_eq!(
            text_fields.keys().collect::<Vec<_>>(),
            json_fields.keys().collect::<Vec<_>>(),
            "\ntext: {text}\njson: {json}"
        );
        // The values that do not depend on timing are the same too.
        for key in [
            "service",
            "route",
            "protocol",
            "outcome",
            "source",
            "http_status",
            "required_ms",
        ] {
            assert_eq!(text_fields.get(key), json_fields.get(key), "{key}");
        }
        let object: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(object["message"], "hop ended");
        assert_eq!(object["level"], "INFO");
        // Numbers stay numbers, for a pipeline to compare: the answer's status when the
        // service answered, the route's minimum when the proxy refused.
        let answered = if budget == "5" {
            "required_ms"
        } else {
            "http_status"
        };
        for key in ["budget_ms", "used_ms", answered] {
            assert!(object[key].is_u64(), "{key}: {json}");
        }
    }
}

#[test]
fn a_log_format_it_does_not_know_is_refused_naming_the_ones_it_has() {
    let _module = crate::support::serial::module(module_path!());
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_hopbudget"))
        .args([
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "127.0.0.1:1",
        ])
        .args(["--log-format", "yaml"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("'yaml'") && stderr.contains("text") && stderr.contains("json"),
        "{stderr}"
    );
}
