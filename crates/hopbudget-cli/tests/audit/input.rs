//! `hopbudget audit` on input that is not what it should be: malformed lines, a truncated
//! file, a truncated gzip stream, traces with spans missing (partial), a Collector-style
//! gzip file; and a property test that no input, however arbitrary, makes it panic.

use std::io::Write;

use hopbudget_cli::audit::{self, AuditOptions, FindingKind, generate};
use proptest::prelude::*;

fn traces(spans: u64, forgetful: Option<&str>) -> Vec<u8> {
    let mut out = Vec::new();
    generate::write(&mut out, spans, forgetful, 7).unwrap();
    out
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

fn opts() -> AuditOptions {
    AuditOptions::default()
}

#[test]
fn generated_traces_with_a_forgetful_hop_show_the_break_and_the_spike() {
    let r = audit::run_reader(
        "gen",
        &traces(40_000, Some("warehouse-router"))[..],
        &opts(),
    );
    let kinds: Vec<_> = r
        .findings
        .iter()
        .map(|f| (f.kind, f.hop.as_str()))
        .collect();
    assert!(
        kinds.contains(&(FindingKind::ChainBreak, "warehouse-router grpc")),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&(FindingKind::TimeoutSpike, "warehouse-router grpc")),
        "{kinds:?}"
    );
    assert_eq!(r.exit_status(), 1);
    assert_eq!(r.traces.partial, 0);
    let clean = audit::run_reader("gen", &traces(40_000, None)[..], &opts());
    assert_eq!(clean.chain_breaks(), 0, "{:?}", clean.findings);
    assert_eq!(clean.exit_status(), 0, "{:?}", clean.findings);
}

/// The `hopbudget` binary on files: `audit --json` prints the report and exits 1 on a chain
/// break, 0 on clean traces; `gen-traces` writes the file it says it wrote.
#[test]
fn the_binary_exits_1_on_a_chain_break_and_0_on_clean_traces() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_hopbudget"))
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{stderr}");
        (out.status.code(), String::from_utf8(out.stdout).unwrap())
    };
    let broken = dir.join("audit-binary-broken.otlp.jsonl.gz");
    let (status, said) = run(&[
        "gen-traces",
        broken.to_str().unwrap(),
        "--spans",
        "4000",
        "--forgetful",
        "inventory",
    ]);
    assert_eq!(status, Some(0), "{said}");
    let (status, json) = run(&["audit", "--json", broken.to_str().unwrap()]);
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(status, Some(1), "{json}");
    assert!(
        report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["kind"] == "chain_break"),
        "{json}"
    );

    let clean = dir.join("audit-binary-clean.otlp.jsonl");
    std::fs::write(&clean, traces(4_000, None)).unwrap();
    let (status, table) = run(&["audit", clean.to_str().unwrap()]);
    assert_eq!(status, Some(0), "{table}");
}

#[test]
fn gzip_reads_like_plain() {
    let plain = traces(4_000, Some("inventory"));
    let a = audit::run_reader("plain", &plain[..], &opts());
    let b = audit::run_reader("gz", &gzip(&plain)[..], &opts());
    assert_eq!(a.input.spans, b.input.spans);
    assert_eq!(b.problems_total, 0, "{:?}", b.problems);
    assert_eq!(
        serde_json::to_value(&a.findings).unwrap(),
        serde_json::to_value(&b.findings).unwrap()
    );
    // Several gzip members one after the other (a file exporter appending) read as one.
    let mut two = gzip(&plain);
    two.extend(gzip(&plain));
    let c = audit::run_reader("gz2", &two[..], &opts());
    assert_eq!(c.input.spans, 2 * a.input.spans);
}

#[test]
fn a_truncated_file_is_reported_with_its_line_and_the_rest_is_audited() {
    let full = traces(4_000, None);
    let cut = &full[..full.len() * 2 / 3];
    let r = audit::run_reader("cut.jsonl", cut, &opts());
    assert_eq!(r.problems_total, 1, "{:?}", r.problems);
    let p = &r.problems[0];
    assert_eq!(p.file, "cut.jsonl");
    let lines = cut.iter().filter(|&&b| b == b'\n').count() as u64;
    assert_eq!(p.line, Some(lines + 1));
    assert!(p.reason.contains("truncated"), "{p}");
    assert!(r.input.spans > 2_000);
    assert_eq!(r.exit_status(), 3);

    let gz = gzip(&full);
    let r = audit::run_reader("cut.jsonl.gz", &gz[..gz.len() / 2], &opts());
    assert!(r.problems_total >= 1, "{:?}", r.problems);
    assert!(
        r.problems
            .iter()
            .any(|p| p.to_string().contains("ends early")),
        "{:?}",
        r.problems
    );
}

#[test]
fn malformed_lines_and_spans_are_named_and_skipped() {
    let full = String::from_utf8(traces(800, None)).unwrap();
    let mut lines: Vec<String> = full.lines().map(str::to_owned).collect();
    lines.insert(1, "{\"resourceSpans\": 7}".into());
    lines.insert(2, "\u{1f600} not json".into());
    lines[0] = lines[0].replacen("\"spanId\":\"", "\"spanId\":\"zz", 1);
    let text = lines.join("\n") + "\n";
    let r = audit::run_reader("bad.jsonl", text.as_bytes(), &opts());
    let shown: Vec<String> = r.problems.iter().map(ToString::to_string).collect();
    assert_eq!(r.problems_total, 3, "{shown:#?}");
    assert!(
        shown[0].starts_with("bad.jsonl:1: span 1: spanId"),
        "{shown:#?}"
    );
    assert!(
        shown[1].starts_with("bad.jsonl:2: not an OTLP JSON"),
        "{shown:#?}"
    );
    assert!(
        shown[2].starts_with("bad.jsonl:3: not an OTLP JSON"),
        "{shown:#?}"
    );
    assert_eq!(r.input.bad_lines, 2);
    assert_eq!(r.input.bad_spans, 1);
}

#[test]
fn partial_traces_are_counted_not_mistaken_for_breaks() {
    // Drop every span of one service: the hops below it lose their caller.
    let full = String::from_utf8(traces(8_000, None)).unwrap();
    let mut kept = String::new();
    for line in full.lines() {
        let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
        v["resourceSpans"]
            .as_array_mut()
            .unwrap()
            .retain(|rs| rs["resource"]["attributes"][0]["value"]["stringValue"] != "inventory");
        kept.push_str(&v.to_string());
        kept.push('\n');
    }
    let r = audit::run_reader("partial.jsonl", kept.as_bytes(), &opts());
    assert_eq!(r.traces.partial, 1_000, "{:?}", r.traces);
    assert_eq!(r.chain_breaks(), 0);
    assert_eq!(r.problems_total, 0);
}

#[test]
fn zstd_is_named_not_misread() {
    let r = audit::run_reader("t.zst", &[0x28, 0xb5, 0x2f, 0xfd, 1, 2, 3][..], &opts());
    assert!(r.problems[0].reason.contains("zstd"), "{:?}", r.problems);
}

fn valid_line() -> String {
    String::from_utf8(traces(16, Some("pricing")))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_owned()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2_048)) {
        let r = audit::run_reader("fuzz", &bytes[..], &opts());
        let _ = audit::render::table(&r);
        let _ = audit::page::html(&r);
    }

    // Mostly printable flips, so that the line often stays JSON and the damage reaches the
    // span fields (ids, times, attribute values) rather than stopping at the parser.
    #[test]
    fn damaged_valid_input_never_panics(
        cut in prop_oneof![Just(4_000usize), 0usize..4_000],
        flips in proptest::collection::vec(
            (0usize..16_000, prop_oneof![4 => 0x20u8..0x7f, 1 => any::<u8>()]),
            0..8,
        ),
        zipped in any::<bool>(),
    ) {
        let mut bytes = valid_line().into_bytes();
        bytes.push(b'\n');
        bytes.extend(bytes.clone());
        for (at, b) in flips {
            let n = bytes.len();
            bytes[at % n] = b;
        }
        if zipped {
            bytes = gzip(&bytes);
        }
        bytes.truncate(cut.max(1) * bytes.len() / 4_000);
        let r = audit::run_reader("fuzz", &bytes[..], &opts());
        let _ = audit::render::json(&r);
    }
}

/// One hand-made hop span as OTLP JSON.
fn hop(
    trace: u32,
    id: u32,
    parent: u32,
    service: &str,
    start_ms: u64,
    attrs: &[(&str, &str)],
) -> String {
    let attrs: Vec<String> = attrs
        .iter()
        .map(|(k, v)| match v.parse::<i64>() {
            Ok(n) => format!(r#"{{"key":"{k}","value":{{"intValue":"{n}"}}}}"#),
            Err(_) => format!(r#"{{"key":"{k}","value":{{"stringValue":"{v}"}}}}"#),
        })
        .collect();
    let parent = if parent == 0 {
        String::new()
    } else {
        format!("{parent:016x}")
    };
    let t0 = 1_765_000_000_000_000_000u64 + u64::from(trace) * 1_000_000_000;
    format!(
        r#"{{"traceId":"{trace:032x}","spanId":"{id:016x}","parentSpanId":"{parent}","name":"{service}","kind":2,"startTimeUnixNano":"{}","endTimeUnixNano":"{}","attributes":[{},{{"key":"service.name","value":{{"stringValue":"{service}"}}}}]}}"#,
        t0 + start_ms * 1_000_000,
        t0 + (start_ms + 10) * 1_000_000,
        attrs.join(",")
    )
}

fn line(spans: &[String]) -> String {
    format!(
        r#"{{"resourceSpans":[{{"resource":{{}},"scopeSpans":[{{"spans":[{}]}}]}}]}}"#,
        spans.join(",")
    ) + "\n"
}

#[test]
fn missing_deadlines_late_work_over_shrunk_chains_and_epoch_skew_are_found() {
    let mut text = String::new();
    for t in 1..=20u32 {
        // edge (400 ms) -> mid -> leaf: the leaf needs 200 ms and is refused with 80 (S6);
        // mid's deadline came as an epoch instant from a clock 300 ms ahead (S3): it sees
        // 400 - 5 (edge's margin) - 300 = 95 ms less the time edge spent before calling.
        let spent = u64::from(t % 3);
        text += &line(&[
            hop(
                t,
                1,
                0,
                "edge",
                0,
                &[
                    ("deadline.remaining_ms", "400"),
                    ("deadline.source", "relative-ms"),
                    ("deadline.margin_ms", "5"),
                    ("deadline.outcome", "completed"),
                ],
            ),
            hop(
                t,
                2,
                1,
                "mid",
                spent,
                &[
                    ("deadline.remaining_ms", &(95 - spent as i64).to_string()),
                    ("deadline.source", "epoch-ms"),
                    ("deadline.margin_ms", "5"),
                    ("deadline.outcome", "completed"),
                    // Half of them 30 ms late, within the late-work tolerance (50 ms).
                    ("deadline.overrun_ms", if t % 2 == 0 { "80" } else { "30" }),
                ],
            ),
            hop(
                t,
                3,
                2,
                "leaf",
                spent + 1,
                &[
                    ("deadline.remaining_ms", "80"),
                    (
                        "deadline.source",
                        if t <= 4 { "fallback" } else { "grpc-timeout" },
                    ),
                    ("deadline.outcome", "refused"),
                    ("deadline.required_ms", "200"),
                ],
            ),
        ]);
    }
    let r = audit::run_reader("made.jsonl", text.as_bytes(), &opts());
    let table = audit::render::table(&r);
    let find = |kind: FindingKind| {
        r.findings
            .iter()
            .find(|f| f.kind == kind)
            .unwrap_or_else(|| panic!("no {kind:?}\n{table}"))
    };
    let offset = find(FindingKind::ClockOffset);
    assert_eq!(
        (offset.hop.as_str(), offset.value_ms),
        ("edge -> mid", Some(300)),
        "{table}"
    );
    let missing = find(FindingKind::MissingDeadline);
    assert_eq!(
        (missing.hop.as_str(), missing.count),
        ("leaf", 4),
        "{table}"
    );
    let late = find(FindingKind::LateWork);
    assert_eq!(
        (late.hop.as_str(), late.count, late.value_ms),
        ("mid", 10, Some(80)),
        "{table}"
    );
    let shrunk = find(FindingKind::EntryBudgetTooSmall);
    assert!(
        shrunk
            .detail
            .contains("entry budget too small for this chain depth")
            && shrunk.detail.contains("about 520 ms"),
        "{table}"
    );
    assert_eq!(r.chain_breaks(), 0, "{table}");
}
