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
        let _ = audit::render::html(&r);
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
