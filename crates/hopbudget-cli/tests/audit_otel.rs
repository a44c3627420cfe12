//! `hopbudget audit` on plain OpenTelemetry traces (issue #36): spans written by the real
//! OpenTelemetry Python SDK with no hopbudget anywhere (`tests/fixtures/otel-python/`, see
//! its README), and the honest answer when there is nothing to judge.

use std::path::PathBuf;

use hopbudget_cli::audit::{self, AuditOptions, Report};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/otel-python")
        .join(name)
}

fn audit_fixture(name: &str) -> Report {
    audit::run(&[fixture(name)], &AuditOptions::default())
}

fn audit_text(text: &str) -> Report {
    audit::run_reader("t.jsonl", text.as_bytes(), &AuditOptions::default())
}

/// The `hopbudget` binary: its exit status and what it printed.
fn binary(args: &[&str], stdin: &[u8]) -> (Option<i32>, String) {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_hopbudget"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    (out.status.code(), String::from_utf8(out.stdout).unwrap())
}

/// Internal spans only: nothing carries a deadline, nothing has a caller to time against.
fn internal_spans(n: usize) -> String {
    let spans: Vec<String> = (1..=n)
        .map(|i| {
            format!(
                r#"{{"traceId":"0102030405060708090a0b0c0d0e0f{i:02x}","spanId":"00000000000000{i:02x}","name":"work","kind":1,"startTimeUnixNano":"1000000000","endTimeUnixNano":"1005000000"}}"#
            )
        })
        .collect();
    format!(
        r#"{{"resourceSpans":[{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"batch"}}}}]}},"scopeSpans":[{{"spans":[{}]}}]}}]}}"#,
        spans.join(",")
    ) + "\n"
}

#[test]
fn an_empty_input_is_nothing_to_judge_with_its_own_exit_status() {
    let r = audit_text("");
    assert_eq!(
        r.nothing_to_judge.as_deref(),
        Some("nothing to judge: the input is empty")
    );
    assert_eq!(r.exit_status(), 4);
    let (status, table) = binary(&["audit", "-"], b"");
    assert_eq!(status, Some(4), "{table}");
    assert!(
        table.contains("nothing to judge: the input is empty"),
        "{table}"
    );
    assert!(!table.contains("findings: none"), "{table}");
}

#[test]
fn spans_with_nothing_to_judge_say_so_and_why() {
    let r = audit_text(&internal_spans(16));
    assert_eq!(r.input.spans, 16);
    let why = r.nothing_to_judge.as_deref().unwrap_or_default();
    assert!(why.starts_with("nothing to judge: 0 of 16 spans"), "{why}");
    assert!(why.contains("deadline header"), "{why}");
    assert_eq!(r.exit_status(), 4);
    let (status, json) = binary(&["audit", "--json", "-"], internal_spans(3).as_bytes());
    assert_eq!(status, Some(4), "{json}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(
        v["nothing_to_judge"]
            .as_str()
            .unwrap()
            .contains("0 of 3 spans"),
        "{json}"
    );
}

#[test]
fn repeated_input_problems_are_grouped_by_kind_with_a_count_and_first_examples() {
    let mut text = String::new();
    for _ in 0..40 {
        text.push_str("not json at all\n");
    }
    for i in 0..25 {
        text.push_str(&format!(
            r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"zz{i}"}}]}}]}}]}}"#
        ));
        text.push('\n');
    }
    let r = audit_text(&text);
    assert_eq!(r.problems_total, 65);
    let kinds: Vec<(&str, u64, usize)> = r
        .problem_kinds
        .iter()
        .map(|k| (k.kind.as_str(), k.count, k.examples.len()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("not an OTLP JSON trace request", 40, 3),
            ("span skipped: spanId", 25, 3)
        ]
    );
    assert_eq!(r.problem_kinds[1].examples[0].line, Some(41));
    let table = audit::render::table(&r);
    assert!(
        table.contains("  40 x not an OTLP JSON trace request\n"),
        "{table}"
    );
    assert!(
        table.contains("      e.g. t.jsonl:41: span 1: spanId"),
        "{table}"
    );
    assert_eq!(table.matches("e.g. t.jsonl").count(), 6, "{table}");
    assert_eq!(
        r.exit_status(),
        4,
        "no span could be read: nothing to judge"
    );
}

#[test]
fn base64_ids_are_decoded_and_named() {
    let hex = audit_fixture("plain-otel.jsonl.gz");
    let b64 = audit_fixture("plain-otel-base64ids.jsonl.gz");
    assert_eq!(hex.input.base64_ids, 0);
    assert_eq!(b64.problems_total, 0, "{:?}", b64.problem_kinds);
    assert!(b64.input.spans > 0);
    assert_eq!(b64.input.base64_ids, b64.input.spans);
    assert!(
        audit::render::table(&b64).contains("spans had base64 ids"),
        "{}",
        audit::render::table(&b64)
    );
}
