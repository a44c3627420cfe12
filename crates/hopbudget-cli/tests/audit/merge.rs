//! `hopbudget audit --merge` (issue #36, item 7): the `--json` reports of instances that
//! each audited part of the traces merge into exactly the report of one audit of all of them
//! (findings, rollout, medians), in the table, `--json` and `--html`; inputs that are not
//! audit reports of this version, or were audited with other settings, are refused with exit
//! status 2. On the Python SDK's spans (`tests/fixtures/otel-python/`), split by trace id as
//! the Collector's Kafka exporter with `partition_traces_by_id` splits them. The Kafka
//! consumers themselves are tested in `audit/kafka.rs`.

use std::path::{Path, PathBuf};

use crate::support::command::hopbudget;
use crate::support::fixture::{fixture_lines, per_trace, to_text};
use crate::support::merge::comparable;
use serde_json::Value;

fn dir() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "audit_merge-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

/// The fixture's traces dealt to `n` shards by trace id, one request per trace; each shard
/// audited with `--json`: the report files.
fn shard_reports(dir: &Path, n: usize) -> Vec<String> {
    let mut shards = vec![Vec::new(); n];
    // Every piece of a trace (each service exported its own) goes to one shard, as a Kafka
    // partition keyed by trace id; the traces alternate, so every shard sees every service.
    let mut seen: Vec<String> = Vec::new();
    for (trace, req) in per_trace(&fixture_lines()) {
        let i = seen.iter().position(|t| *t == trace).unwrap_or_else(|| {
            seen.push(trace);
            seen.len() - 1
        });
        shards[i % n].push(req);
    }
    shards
        .iter()
        .enumerate()
        .map(|(i, reqs)| {
            let spans = write(dir, &format!("shard{i}.jsonl"), &to_text(reqs));
            let (_, json, _) = hopbudget(&["audit", "--json", &spans]);
            write(dir, &format!("shard{i}.json"), &json)
        })
        .collect()
}

/// Two and three shards merged equal the audit of the whole file: every finding with its
/// counts, medians and maxima, the rollout map, the tables; and the exit status.
#[test]
fn merged_shard_reports_equal_one_audit_of_all_the_spans() {
    let d = dir();
    let whole = write(&d, "whole.jsonl", &to_text(&fixture_lines()));
    let (status, json, _) = hopbudget(&["audit", "--json", &whole]);
    let one: Value = serde_json::from_str(&json).unwrap();
    assert!(one["findings"].as_array().unwrap().len() >= 4, "{json}");
    for n in [2, 3] {
        let reports = shard_reports(&d, n);
        let parts: Vec<Value> = reports
            .iter()
            .map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
            .collect();
        // Each shard alone sees fewer calls than the whole.
        for p in &parts {
            assert!(p["input"]["spans"].as_u64() < one["input"]["spans"].as_u64());
        }
        let mut args = vec!["audit", "--merge", "--json"];
        args.extend(reports.iter().map(String::as_str));
        let (merged_status, merged, err) = hopbudget(&args);
        let merged: Value = serde_json::from_str(&merged).unwrap_or_else(|e| panic!("{e}: {err}"));
        assert_eq!(comparable(&merged), comparable(&one), "{n} shards");
        assert_eq!(merged_status, status, "{n} shards: the exit status");
    }
}

/// The same with hop spans (`deadline.*` attributes, C14), from `gen-traces` with a service
/// that ignores inbound deadlines: the per-hop rows, the hop tree, the depths and the chain
/// break (S13) with its median merge exactly too.
#[test]
fn merged_shards_of_hop_spans_equal_one_audit_of_them() {
    let d = dir();
    let whole = d.join("gen.jsonl").display().to_string();
    let (status, _, err) = hopbudget(&[
        "gen-traces",
        &whole,
        "--spans",
        "4000",
        "--forgetful",
        "pricing",
    ]);
    assert_eq!(status, Some(0), "{err}");
    let lines: Vec<Value> = std::fs::read_to_string(&whole)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut shards = vec![Vec::new(); 2];
    let mut seen: Vec<String> = Vec::new();
    for (trace, req) in per_trace(&lines) {
        let i = seen.iter().position(|t| *t == trace).unwrap_or_else(|| {
            seen.push(trace);
            seen.len() - 1
        });
        shards[i % 2].push(req);
    }
    let reports: Vec<String> = shards
        .iter()
        .enumerate()
        .map(|(i, reqs)| {
            let spans = write(&d, &format!("gen{i}.jsonl"), &to_text(reqs));
            let (_, json, _) = hopbudget(&["audit", "--json", &spans]);
            write(&d, &format!("gen{i}.json"), &json)
        })
        .collect();
    let (one_status, one, _) = hopbudget(&["audit", "--json", &whole]);
    let one: Value = serde_json::from_str(&one).unwrap();
    assert!(
        one["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["kind"] == "chain_break"),
        "{one}"
    );
    assert!(!one["hops"].as_array().unwrap().is_empty());
    let (merged_status, merged, err) =
        hopbudget(&["audit", "--merge", "--json", &reports[0], &reports[1]]);
    let merged: Value = serde_json::from_str(&merged).unwrap_or_else(|e| panic!("{e}: {err}"));
    assert_eq!(comparable(&merged), comparable(&one));
    assert_eq!(merged_status, one_status);
}

/// The table and the page of a merge are a normal audit's.
#[test]
fn a_merge_prints_the_table_and_writes_the_page() {
    let d = dir();
    let reports = shard_reports(&d, 2);
    let page = d.join("merged.html").display().to_string();
    let (_, table, _) = hopbudget(&[
        "audit",
        "--merge",
        "--html",
        &page,
        &reports[0],
        &reports[1],
    ]);
    let whole = write(&d, "whole.jsonl", &to_text(&fixture_lines()));
    let (_, one, _) = hopbudget(&["audit", &whole]);
    // The table names what it read: the merged counts differ only in the input lines.
    let findings = |t: &str| -> Vec<String> {
        t.lines()
            .skip_while(|l| !l.to_lowercase().contains("finding"))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(findings(&table), findings(&one));
    assert!(!findings(&table).is_empty(), "{table}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("gateway"), "{html}");
}

/// Not JSON, JSON that is no audit report, a report of another version and reports audited
/// with other settings: exit status 2, naming the file and what is wrong.
#[test]
fn inputs_that_cannot_be_merged_are_refused_with_exit_status_2() {
    let d = dir();
    let reports = shard_reports(&d, 2);
    let spans = write(&d, "spans.jsonl", &to_text(&fixture_lines()));
    let other = write(&d, "other.json", "{\"findings\": []}\n");
    let mut old: Value =
        serde_json::from_str(&std::fs::read_to_string(&reports[1]).unwrap()).unwrap();
    old["hopbudget_version"] = "0.0.9".into();
    let old = write(&d, "old.json", &old.to_string());
    let mut format: Value =
        serde_json::from_str(&std::fs::read_to_string(&reports[1]).unwrap()).unwrap();
    format["merge_state"]["format"] = 99.into();
    let format = write(&d, "format.json", &format.to_string());
    let mut edited: Value =
        serde_json::from_str(&std::fs::read_to_string(&reports[1]).unwrap()).unwrap();
    edited["merge_state"]["acc"] = "gone".into();
    let edited = write(&d, "edited.json", &edited.to_string());
    let tolerant = {
        let shard = d.join("shard1.jsonl").display().to_string();
        let (_, json, _) = hopbudget(&["audit", "--json", "--tolerance-ms", "9", &shard]);
        write(&d, "tolerant.json", &json)
    };
    let cases: [(&str, &str); 6] = [
        (
            &spans,
            "is not the --json output of `hopbudget audit` (not a JSON object",
        ),
        (&other, "is not the --json output of `hopbudget audit`"),
        (&old, "was written by hopbudget 0.0.9"),
        (&format, "(merge state format 99)"),
        (&edited, "its merge_state cannot be read"),
        (&tolerant, "was audited with other settings"),
    ];
    for (bad, says) in cases {
        let (status, out, err) = hopbudget(&["audit", "--merge", &reports[0], bad]);
        assert_eq!(status, Some(2), "{bad}: {err}");
        assert!(err.contains(bad) && err.contains(says), "{bad}: {err}");
        assert!(out.is_empty(), "{out}");
    }
    let (status, _, err) = hopbudget(&[
        "audit",
        "--merge",
        &d.join("missing.json").display().to_string(),
    ]);
    assert_eq!(status, Some(2));
    assert!(
        err.contains("cannot read") && err.contains("missing.json"),
        "{err}"
    );
}

/// Without the `kafka` feature, `--kafka` names the feature to build with.
#[cfg(not(feature = "kafka"))]
#[test]
fn without_the_kafka_feature_kafka_says_which_feature_to_enable() {
    let (status, _, err) = hopbudget(&["audit", "--kafka", "127.0.0.1:9092", "--topic", "t"]);
    assert_eq!(status, Some(2));
    assert!(err.contains("`kafka` feature"), "{err}");
}

/// The HTML page's pictures (#50 item 10) come out the same from merged shards as from one
/// audit: the call graph with its edge labels (the medians told on arrival merge exactly),
/// the histograms with their spikes, the work-for-nobody bars.
#[test]
fn merged_shards_draw_the_same_pictures_as_one_audit() {
    let d = dir();
    let whole = write(&d, "whole.jsonl", &to_text(&fixture_lines()));
    let one_page = d.join("one.html").display().to_string();
    hopbudget(&["audit", "--html", &one_page, &whole]);
    let reports = shard_reports(&d, 2);
    let merged_page = d.join("merged.html").display().to_string();
    let mut args = vec!["audit", "--merge", "--html", &merged_page];
    args.extend(reports.iter().map(String::as_str));
    hopbudget(&args);
    let pictures = |path: &str| {
        let page = std::fs::read_to_string(path).unwrap();
        let part = |from: &str, to: &str| {
            let start = page
                .find(from)
                .unwrap_or_else(|| panic!("no {from} in {path}"));
            page[start..start + page[start..].find(to).unwrap()].to_owned()
        };
        (
            part("<h2 id=\"call-graph\">", "<h2 id=\"findings\">"),
            part("<h2 id=\"durations\">", "<h2>Rollout map</h2>"),
        )
    };
    let (graph, charts) = pictures(&one_page);
    assert!(graph.contains("800 ms left") && charts.contains("class=\"spike\""));
    assert_eq!(pictures(&merged_page), (graph, charts));
}
