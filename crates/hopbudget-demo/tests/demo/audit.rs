//! `hopbudget audit` on the demo's own traces: the demo's services run in process, the
//! library exports their hop spans as OTLP JSON (trace context carried on the wire), and
//! the operator's `hopbudget audit` (crate hopbudget-cli, in process) audits the file. With
//! `--forgetful warehouse-router` (S13) the audit names warehouse-router as the hop where the
//! budget was reset, inventory as the caller it ignored, reco-scorer as the hop below that ran
//! on the reset budget, and exits 1; on clean traces it finds no chain break and exits 0.
//!
//! It lives with the demo because the traces are the demo's (its `--forgetful` option exists
//! to make them); the audit comes in as a dev-dependency, so the operator's crate never
//! compiles the demo. The `hopbudget` binary itself is run on traces by `audit/input.rs`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::serial::one_demo_at_a_time;
use clap::Parser;
use hopbudget_cli::audit::command::{self, AuditArgs};
use hopbudget_demo::demo::{self, DemoOptions, Mode, Topology};

/// Run the demo in propagated mode and write its traces where the audit can read them.
fn demo_traces(forgetful: Option<&str>, name: &str) -> PathBuf {
    let topology = Topology::builtin().unwrap();
    let mut opts = DemoOptions::new(topology.clone());
    opts.modes = vec![Mode::Propagated];
    opts.duration = Some(Duration::from_secs(3));
    opts.drain_limit = Duration::from_secs(3);
    opts.forgetful = forgetful.map(Into::into);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("audit-demo-{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    opts.traces = Some(dir.clone());
    demo::run(&opts).unwrap();
    // Written by the library's exporter during the run.
    demo::traces::path_for(&dir, Mode::Propagated)
}

/// `hopbudget audit ARGS…`, run in process through the command's own argument parser and
/// code (`audit_to` is what the binary runs, with standard output as `out`): the binary is
/// another package's, out of this test's reach. Its exit status and standard output.
fn audit(args: &[&str]) -> (i32, String) {
    let parsed = Audit::try_parse_from(std::iter::once("audit").chain(args.iter().copied()))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut out = Vec::new();
    let status = command::audit_to(&parsed.args, &mut out);
    (i32::from(status), String::from_utf8(out).unwrap())
}

/// The `audit` subcommand's arguments, as the `hopbudget` binary parses them.
#[derive(Parser)]
struct Audit {
    #[command(flatten)]
    args: AuditArgs,
}

#[test]
fn audit_names_the_forgetful_hop_and_the_reset_below_it_then_finds_nothing_on_clean_traces() {
    let _demo = one_demo_at_a_time();
    let broken = demo_traces(Some("warehouse-router"), "forgetful");
    let html = broken.with_extension("html");
    let (status, json) = audit(&[
        broken.to_str().unwrap(),
        "--json",
        "--html",
        html.to_str().unwrap(),
    ]);
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(status, 1, "a chain break exits 1\n{json}");
    let breaks: Vec<&serde_json::Value> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "chain_break")
        .collect();
    assert_eq!(breaks.len(), 1, "{json}");
    let b = breaks[0];
    assert!(
        b["hop"].as_str().unwrap().starts_with("warehouse-router"),
        "{json}"
    );
    assert!(
        b["related"][0].as_str().unwrap().starts_with("inventory"),
        "{json}"
    );
    assert!(
        b["below"][0].as_str().unwrap().starts_with("reco-scorer"),
        "{json}"
    );
    assert!(b["value_ms"].as_i64().unwrap() > 1_000, "{json}");
    assert_eq!(report["problems_total"], 0, "{json}");

    // The table says the same for people, and the page shows the reset edge in the tree.
    let (status, table) = audit(&[broken.to_str().unwrap()]);
    assert_eq!(status, 1);
    assert!(
        table.contains("budget reset (S13): warehouse-router")
            && table.contains("below it, reco-scorer"),
        "{table}"
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("<span class=\"reset\">warehouse-router"),
        "{page}"
    );

    let clean = demo_traces(None, "clean");
    let (status, json) = audit(&[clean.to_str().unwrap(), "--json"]);
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    // What the standard status attributes show of the load on this machine is true (#36): a
    // few requests expire (504), and the chain is five services deep. The spans below wind
    // down 10-30 ms after the root answered and a late timer lets a handler finish a few ms
    // after its deadline: within the late-work tolerance (`--late-tolerance-ms`, 50 ms), so
    // no late work. Nothing else (no reset, no spike, no missing deadline) may be found.
    let load = ["expired_or_cancelled", "chain_depth"];
    let findings: Vec<&serde_json::Value> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| !load.iter().any(|k| f["kind"] == *k))
        .collect();
    assert!(findings.is_empty(), "{json}");
    assert_eq!(report["problems_total"], 0, "{json}");
    assert_eq!(status, 0, "{json}");
}
