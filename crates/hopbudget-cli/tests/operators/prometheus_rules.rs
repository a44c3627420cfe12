//! The Prometheus rules operators load (`deploy/prometheus/hopbudget-rules.yml`, issue #50):
//! checked and unit-tested with `promtool`, each rule seen to fail its unit tests when it is
//! broken, and every metric and bucket they read one that hopbudget really exposes.
//!
//! Needs `promtool` (Debian's `prometheus` package: `apt-get install prometheus`; or set
//! `PROMTOOL`). Without it the promtool tests say so and pass, unless
//! `HOPBUDGET_REQUIRE_SERVICES=1`, where they fail. By hand:
//! `cargo test -p hopbudget-cli --test operators prometheus_rules::`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::proxy;
use hopbudget::observe::{self, prometheus::DURATION_BUCKETS_MS};

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/prometheus")
}

fn rules() -> String {
    std::fs::read_to_string(deploy().join("hopbudget-rules.yml")).unwrap()
}

fn promtool() -> Option<String> {
    proxy::program(
        "PROMTOOL",
        "promtool",
        &["--version"],
        "install Debian's prometheus package (apt-get install prometheus), which ships promtool",
    )
}

/// `promtool test rules` on `dir`'s copy of the unit tests: whether they passed, and what
/// promtool said.
fn unit_tests(promtool: &str, dir: &Path) -> (bool, String) {
    let out = Command::new(promtool)
        .args(["test", "rules", "hopbudget-rules.test.yml"])
        .current_dir(dir)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

#[test]
fn the_rules_pass_promtool_check_and_their_unit_tests() {
    let Some(promtool) = promtool() else { return };
    let check = Command::new(&promtool)
        .args(["check", "rules", "hopbudget-rules.yml"])
        .current_dir(deploy())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success() && said.contains("SUCCESS"),
        "{said}{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let (passed, said) = unit_tests(&promtool, &deploy());
    assert!(passed && said.contains("SUCCESS"), "{said}");
}

/// Each rule's name (a `record:` or an `alert:`) in the order of the file.
fn rule_names(rules: &str) -> Vec<String> {
    rules
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            l.strip_prefix("- record: ")
                .or_else(|| l.strip_prefix("- alert: "))
        })
        .map(|n| n.trim().to_owned())
        .collect()
}

/// `rules` with `from` replaced by `to` once, inside the rule named `name` only.
fn broken(rules: &str, name: &str, from: &str, to: &str) -> String {
    let start = [format!("- record: {name}\n"), format!("- alert: {name}\n")]
        .iter()
        .find_map(|head| rules.find(head.as_str()))
        .unwrap_or_else(|| panic!("no rule {name}"));
    let rest = &rules[start + 2..];
    let end = start
        + 2
        + [rest.find("\n      - "), rest.find("\n  - name:")]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(rest.len());
    let block = &rules[start..end];
    assert!(block.contains(from), "{name} has no {from:?}:\n{block}");
    format!(
        "{}{}{}",
        &rules[..start],
        block.replacen(from, to, 1),
        &rules[end..]
    )
}

/// How each rule is broken: (rule, text in it, what it becomes). Every rule has at least one;
/// an alert has one on each side of its threshold or for its guard.
const BREAKS: &[(&str, &str, &str)] = &[
    (
        "hopbudget:arrivals:rate5m",
        "rate(hopbudget_arrivals_total[5m])",
        "increase(hopbudget_arrivals_total[5m])",
    ),
    (
        "hopbudget:hops:rate5m",
        "rate(hopbudget_hops_total[5m])",
        "rate(hopbudget_hops_total{outcome=\"completed\"}[5m])",
    ),
    (
        "hopbudget:refused_before_work:ratio_rate5m",
        "sum by (service, route) (rate(hopbudget_arrivals_total[5m]))",
        "sum by (service, route) (rate(hopbudget_hops_total[5m]))",
    ),
    (
        "hopbudget:refused_before_work:ratio_rate1h",
        "rate(hopbudget_refused_before_work_total[1h])",
        "rate(hopbudget_refused_before_work_total[5m])",
    ),
    (
        "hopbudget:low_budget_arrivals:ratio_rate5m",
        "rate(hopbudget_low_budget_arrivals_total[5m])",
        "rate(hopbudget_refused_before_work_total[5m])",
    ),
    // Expired and cancelled merged: no longer kept apart.
    (
        "hopbudget:hops_expired:ratio_rate5m",
        "outcome=\"expired\"",
        "outcome=~\"expired|cancelled\"",
    ),
    (
        "hopbudget:hops_cancelled:ratio_rate5m",
        "outcome=\"cancelled\"",
        "outcome=~\"expired|cancelled\"",
    ),
    // Calls sent without a deadline counted as arrivals without one.
    (
        "hopbudget:deadline_missing:ratio_rate5m",
        "{route!=\"(outbound)\"}",
        "",
    ),
    (
        "hopbudget:deadline_missing:ratio_rate5m",
        "or\n            0 *",
        "or\n            1 *",
    ),
    (
        "hopbudget:deadline_missing_outbound:rate5m",
        "{route=\"(outbound)\"}",
        "",
    ),
    (
        "hopbudget:late_work:ratio_rate5m",
        "rate(hopbudget_late_work_total[5m])",
        "rate(hopbudget_arrivals_total[5m])",
    ),
    // The band around 1 s collapsed to nothing, and the one around 30 s starting at a bound
    // that is no bucket (so it has no series).
    (
        "hopbudget:hop_duration_at_default:ratio_rate5m",
        "le=\"1050\"",
        "le=\"950\"",
    ),
    (
        "hopbudget:hop_duration_at_default:ratio_rate5m",
        "le=\"28500\"",
        "le=\"1\"",
    ),
    (
        "hopbudget:hop_duration_ms:p99_rate5m",
        "histogram_quantile(0.99,",
        "histogram_quantile(0.5,",
    ),
    (
        "hopbudget:budget_used_ratio:p90_rate5m",
        "histogram_quantile(0.9,",
        "histogram_quantile(0.5,",
    ),
    (
        "HopbudgetRefusedBeforeWork",
        "ratio_rate5m > 0.05",
        "ratio_rate5m > 0.2",
    ),
    // Starved routes no longer left to the starvation alert.
    (
        "HopbudgetRefusedBeforeWork",
        "unless on (service, route)",
        "or on (service, route)",
    ),
    (
        "HopbudgetRefusedBeforeWork",
        "arrivals:rate5m > 0.1",
        "arrivals:rate5m > 0",
    ),
    ("HopbudgetRefusalsRising", "> 3 *", "> 30 *"),
    // No baseline: a high share fires for as long as it lasts.
    ("HopbudgetRefusalsRising", "> 3 *", "> 0 *"),
    ("HopbudgetLowBudgetArrivals", "> 0.2", "> 0.4"),
    (
        "HopbudgetLowBudgetArrivals",
        "arrivals:rate5m > 0.1",
        "arrivals:rate5m > 0",
    ),
    (
        "HopbudgetExpired",
        "ratio_rate5m > 0.05",
        "ratio_rate5m > 0.25",
    ),
    (
        "HopbudgetExpired",
        "ratio_rate5m > 0.05",
        "ratio_rate5m > 0.01",
    ),
    (
        "HopbudgetCancelled",
        "ratio_rate5m > 0.1",
        "ratio_rate5m > 0.5",
    ),
    (
        "HopbudgetCancelled",
        "ratio_rate5m > 0.1",
        "ratio_rate5m > 0.01",
    ),
    ("HopbudgetDeadlineMissing", "for: 30m", "for: 10m"),
    ("HopbudgetDeadlineMissing", "> 0.05", "> 0.01"),
    (
        "HopbudgetLateWork",
        "ratio_rate5m > 0.01",
        "ratio_rate5m > 0.2",
    ),
    (
        "HopbudgetLateWork",
        "arrivals:rate5m > 0.1",
        "arrivals:rate5m > 0",
    ),
    (
        "HopbudgetDroppedDeadline",
        "ratio_rate5m > 0.5",
        "ratio_rate5m > 0.95",
    ),
    (
        "HopbudgetDroppedDeadline",
        "hops:rate5m > 0.05",
        "hops:rate5m > 0",
    ),
    ("HopbudgetDroppedDeadline", "for: 5m", "for: 0m"),
    (
        "HopbudgetLeafStarved",
        "ratio_rate5m > 0.5",
        "ratio_rate5m > 0.9",
    ),
    // Refusals with budgets that arrive large taken for starvation.
    (
        "HopbudgetLeafStarved",
        "and on (service, route) hopbudget:low_budget_arrivals:ratio_rate5m > 0.5\n",
        "",
    ),
];

#[test]
fn each_rule_broken_fails_its_unit_tests() {
    let rules = rules();
    for name in rule_names(&rules) {
        assert!(
            BREAKS.iter().any(|(rule, _, _)| *rule == name),
            "{name} is never broken here: add how to break it to BREAKS"
        );
    }
    let Some(promtool) = promtool() else { return };
    let tests = std::fs::read_to_string(deploy().join("hopbudget-rules.test.yml")).unwrap();
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("prometheus-rules-broken");
    // Two at a time: promtool takes a second or two per run.
    let survivors: Vec<String> = std::thread::scope(|scope| {
        let workers: Vec<_> = [0, 1]
            .into_iter()
            .map(|worker| {
                let (rules, tests, root, promtool) = (&rules, &tests, &root, &promtool);
                scope.spawn(move || {
                    let mut survivors = Vec::new();
                    for (i, (name, from, to)) in BREAKS.iter().enumerate() {
                        if i % 2 != worker {
                            continue;
                        }
                        let dir = root.join(i.to_string());
                        std::fs::create_dir_all(&dir).unwrap();
                        std::fs::write(
                            dir.join("hopbudget-rules.yml"),
                            broken(rules, name, from, to),
                        )
                        .unwrap();
                        std::fs::write(dir.join("hopbudget-rules.test.yml"), tests).unwrap();
                        let (passed, said) = unit_tests(promtool, &dir);
                        if passed {
                            survivors.push(format!("{name}: {from:?} -> {to:?}"));
                        } else {
                            assert!(said.contains("FAILED"), "{name}: {said}");
                            eprintln!("{name}: {from:?} -> {to:?} fails its unit tests");
                        }
                    }
                    survivors
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    assert!(
        survivors.is_empty(),
        "broken, and the unit tests still pass:\n{}",
        survivors.join("\n")
    );
}

/// Every `hopbudget_*` name in the rules is a metric hopbudget exposes (a histogram's
/// `_bucket`, `_count` or `_sum`), every bucket bound they name is one of its buckets, and the
/// recording rules the library ships (`observe::prometheus::RECORDING_RULES`) are in the file
/// as they are there.
#[test]
fn the_rules_read_only_what_hopbudget_exposes() {
    let rules = rules();
    let mut names: Vec<&str> = Vec::new();
    let mut rest = rules.as_str();
    while let Some(at) = rest.find("hopbudget_") {
        let tail = &rest[at..];
        let len = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        // Not the tail of a longer word (a comment's path, an annotation's field).
        let before = rules.len() - rest.len() + at;
        if before == 0
            || !rules.as_bytes()[before - 1].is_ascii_alphanumeric()
                && rules.as_bytes()[before - 1] != b'_'
                && rules.as_bytes()[before - 1] != b'/'
        {
            names.push(&tail[..len]);
        }
        rest = &tail[len..];
    }
    names.sort_unstable();
    names.dedup();
    assert!(names.len() >= 8, "{names:?}");
    for name in &names {
        let known = observe::METRICS.iter().any(|(metric, ty, _)| {
            *name == *metric
                || *ty == "histogram"
                    && ["_bucket", "_count", "_sum"]
                        .iter()
                        .any(|suffix| *name == format!("{metric}{suffix}"))
        });
        assert!(known, "{name} is not a metric hopbudget exposes");
    }

    let mut rest = rules.as_str();
    let mut bounds = 0;
    while let Some(at) = rest.find("hopbudget_hop_duration_ms_bucket{le=\"") {
        let tail = &rest[at + "hopbudget_hop_duration_ms_bucket{le=\"".len()..];
        let bound: f64 = tail[..tail.find('"').unwrap()].parse().unwrap();
        assert!(
            DURATION_BUCKETS_MS.contains(&bound),
            "le=\"{bound}\" is not a bucket of hopbudget_hop_duration_ms"
        );
        bounds += 1;
        rest = tail;
    }
    assert_eq!(bounds, 10, "two bounds for each of five default timeouts");

    let shipped = observe::prometheus::RECORDING_RULES;
    for block in shipped.split("      - record: ").skip(1) {
        let block = block.trim_end();
        assert!(
            rules.contains(&format!("      - record: {block}")),
            "the library's recording rule is not in the file as it is:\n{block}"
        );
    }
}
