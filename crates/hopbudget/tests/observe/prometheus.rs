//! Rule C14: hopbudget's metrics scraped from a real `/metrics` endpoint in Prometheus text
//! format, checking every name, type and label, the histogram buckets and the recording rules.
//!
//! The recorder is the binary's one process-wide recorder (`metrics_support::recorder()`);
//! the service name `tax-prometheus` is this test's alone in the binary. Other tests' series
//! are there too: each has the labels of its metric, which is what this test checks of all.
#![cfg(feature = "prometheus")]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use hopbudget::cache::{CacheChoice, CacheReads};
use hopbudget::codec::Carrier;
use hopbudget::degrade::Degrade;
use hopbudget::observe::{self, Hop, HopLabels, Protocol};
use hopbudget::{Deadline, HopPolicy, Outcome, RequestBudget, Source};

/// One sample line: metric name, labels, value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A small parser for the text exposition format, enough for what the exporter writes.
fn parse(text: &str) -> (BTreeMap<String, String>, BTreeSet<String>, Vec<Sample>) {
    let mut types = BTreeMap::new();
    let mut helps = BTreeSet::new();
    let mut samples = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').unwrap();
            types.insert(name.to_owned(), ty.to_owned());
        } else if let Some(rest) = line.strip_prefix("# HELP ") {
            helps.insert(rest.split_once(' ').unwrap().0.to_owned());
        } else if !line.starts_with('#') {
            let (series, value) = line.rsplit_once(' ').unwrap();
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => {
                    let body = rest.strip_suffix('}').unwrap();
                    let labels = body
                        .split("\",")
                        .map(|kv| {
                            let (k, v) = kv.split_once("=\"").unwrap();
                            (k.to_owned(), v.trim_end_matches('"').to_owned())
                        })
                        .collect();
                    (name.to_owned(), labels)
                }
                None => (series.to_owned(), BTreeMap::new()),
            };
            samples.push(Sample {
                name,
                labels,
                value: value.parse().unwrap(),
            });
        }
    }
    (types, helps, samples)
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s.name == name
                && s.labels.len() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
}

fn drive_hops() {
    let tax = HopLabels::new("tax-prometheus", "/tax/{id}", Protocol::Http);
    let budget = |ms| {
        RequestBudget::from_carrier(
            Carrier::RelativeMs,
            Duration::from_millis(ms),
            HopPolicy::DEFAULT,
        )
    };

    // Two completed with plenty of budget, one arriving with 30 ms (low), one refused at 8 ms.
    Hop::start(&tax, &budget(400)).finish(Outcome::Completed);
    Hop::start(&tax.clone(), &budget(120)).finish(Outcome::Completed);
    Hop::start(&tax, &budget(30)).finish(Outcome::Completed);
    Hop::start(&tax, &budget(8)).refuse(Duration::from_millis(40));
    // No deadline received: the edge total.
    let fallback = RequestBudget::new(
        Deadline::after(Duration::from_secs(2)),
        Source::Fallback,
        HopPolicy::DEFAULT,
    );
    Hop::start(&tax, &fallback).finish(Outcome::Completed);
    // Late work, then the caller saw expired.
    let hop = Hop::start(&tax, &budget(200));
    hop.late_work(Duration::from_millis(75));
    hop.finish(Outcome::Expired);
    // The caller went away.
    drop(Hop::start(&tax, &budget(200)));
    observe::malformed_header(&tax, "x-request-timeout-ms");
    observe::malformed_header(&tax, "x-request-timeout-ms");
    observe::malformed_header(&tax, "grpc-timeout");

    // A gRPC route whose profile says 250 ms is low: a 120 ms arrival counts.
    let quote = HopLabels::new("tax-prometheus", "/tax.Tax/Quote", Protocol::Grpc)
        .with_low_budget(Duration::from_millis(250));
    Hop::start(&quote, &budget(120)).finish(Outcome::Completed);

    // Public fields changed after construction: the hop reports under the new route.
    let mut moved = tax.clone();
    moved.route = "/moved".into();
    Hop::start(&moved, &budget(300)).finish(Outcome::Completed);

    // A cheaper path taken, and a cache read served stale because a recompute could not
    // finish in the budget.
    let thin = budget(100);
    Degrade::new("tax-prometheus", "/tax/{id}", "stale-rates")
        .choose(&thin, Duration::from_millis(180));
    let reads = CacheReads::new("tax-prometheus", "rates");
    let span = reads.span("rates:eu", &thin, Duration::from_millis(250));
    reads.record(&span, CacheChoice::Stale);

    // Labels looked up per request from a borrowed route share the keys of earlier ones.
    let service: std::sync::Arc<str> = "tax-prometheus".into();
    for _ in 0..2 {
        let route = String::from("/interned");
        let labels = HopLabels::for_route(&service, &route, Protocol::Http);
        assert_eq!(&*labels.route, "/interned");
        Hop::start(&labels, &budget(300)).finish(Outcome::Completed);
    }

    observe::queue_expired("billing", "invoices");

    // With enforcement off (C24) an arrival below its route's minimum is let through, and
    // counted by what enforcement would have done.
    let dry_run = std::sync::Arc::new(hopbudget::hop::HopConfig::new(
        hopbudget::Profile::from_yaml(
            "service: tax-prometheus\nenforce: false\nroutes: [{path: /dry-run, min_budget_ms: 200}]\n",
            "dry-run.yaml",
        )
        .unwrap(),
        Protocol::Http,
    ));
    let mut headers = http::HeaderMap::new();
    headers.insert(
        "x-request-timeout-ms",
        http::HeaderValue::from_static("100"),
    );
    match dry_run.admit(&headers, hopbudget::hop::RouteLabel::Path("/dry-run")) {
        hopbudget::hop::Verdict::Admitted(mut guard) => guard.finish(),
        other => panic!("enforcement is off, yet {other:?}"),
    }
}

#[tokio::test]
async fn metrics_endpoint_exposes_every_hopbudget_metric() {
    let handle = crate::metrics_support::recorder().clone();
    observe::describe_metrics();

    let app = Router::new().route("/metrics", get(move || async move { handle.render() }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    drive_hops();

    let response = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap();
    assert!(response.status().is_success());
    let text = response.text().await.unwrap();
    let (types, helps, samples) = parse(&text);

    // Every documented metric: its type, a HELP line, and exactly its labels.
    for (name, ty, labels) in observe::METRICS {
        assert_eq!(
            types.get(name).map(String::as_str),
            Some(ty),
            "type of {name}\n{text}"
        );
        assert!(helps.contains(name), "HELP for {name}");
        let series: Vec<&Sample> = samples
            .iter()
            .filter(|s| match ty {
                "histogram" => {
                    s.name == format!("{name}_bucket")
                        || s.name == format!("{name}_sum")
                        || s.name == format!("{name}_count")
                }
                _ => s.name == name,
            })
            .collect();
        assert!(!series.is_empty(), "no samples of {name}");
        for s in series {
            let mut keys: Vec<&str> = s
                .labels
                .keys()
                .map(String::as_str)
                .filter(|k| *k != "le")
                .collect();
            keys.sort_unstable();
            let mut want = labels.to_vec();
            want.sort_unstable();
            assert_eq!(keys, want, "labels of {s:?}");
        }
    }
    assert_eq!(
        observe::METRICS.len(),
        types.keys().filter(|n| n.starts_with("hopbudget_")).count()
    );

    // The guide's metrics table (docs/guide/observability.md) against the exposition: a row
    // for every hopbudget metric it has, with its type and its labels, and no other row.
    let guide = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/guide/observability.md"
    ))
    .unwrap();
    let mut rows = BTreeMap::new();
    for line in guide.lines().filter(|l| l.starts_with("| `hopbudget_")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let name = cells[1].trim_matches('`');
        let mut labels: Vec<&str> = cells[3].split(", ").map(|l| l.trim_matches('`')).collect();
        labels.sort_unstable();
        rows.insert(name.to_owned(), (cells[2].to_owned(), labels));
    }
    for (name, ty) in types.iter().filter(|(n, _)| n.starts_with("hopbudget_")) {
        let Some((documented, labels)) = rows.remove(name) else {
            panic!("{name} is exposed and has no row in docs/guide/observability.md")
        };
        assert_eq!(&documented, ty, "type of {name} in the guide");
        let mut exposed: BTreeSet<&str> = BTreeSet::new();
        for s in samples.iter().filter(|s| s.name.starts_with(name.as_str())) {
            exposed.extend(s.labels.keys().map(String::as_str).filter(|k| *k != "le"));
        }
        assert_eq!(
            labels,
            exposed.into_iter().collect::<Vec<_>>(),
            "labels of {name} in the guide"
        );
    }
    assert!(rows.is_empty(), "documented, not exposed: {rows:?}");

    assert!(
        text.contains(
            "hopbudget_unenforced_total{service=\"tax-prometheus\",route=\"/dry-run\",would=\"refused\"} 1"
        ),
        "{text}"
    );

    let tax = [("service", "tax-prometheus"), ("route", "/tax/{id}")];
    let with = |extra: (&'static str, &'static str)| [tax[0], tax[1], extra];
    assert_eq!(
        value(
            &samples,
            "hopbudget_hops_total",
            &with(("outcome", "completed"))
        ),
        Some(4.0)
    );
    assert_eq!(
        value(
            &samples,
            "hopbudget_hops_total",
            &with(("outcome", "refused"))
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &samples,
            "hopbudget_hops_total",
            &with(("outcome", "expired"))
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &samples,
            "hopbudget_hops_total",
            &with(("outcome", "cancelled"))
        ),
        Some(1.0)
    );
    // Every hop's duration, by outcome, in the bucket its (short) time falls in; the share of
    // its budget each one used.
    for (outcome, count) in [("completed", 4.0), ("refused", 1.0), ("expired", 1.0)] {
        assert_eq!(
            value(
                &samples,
                "hopbudget_hop_duration_ms_count",
                &with(("outcome", outcome))
            ),
            Some(count),
            "{outcome}"
        );
        let in_bucket = samples.iter().find(|s| {
            s.name == "hopbudget_hop_duration_ms_bucket"
                && s.labels.get("service").map(String::as_str) == Some("tax-prometheus")
                && s.labels.get("route").map(String::as_str) == Some("/tax/{id}")
                && s.labels.get("outcome").map(String::as_str) == Some(outcome)
                && s.labels.get("le").map(String::as_str) == Some("1050")
        });
        assert_eq!(in_bucket.map(|s| s.value), Some(count), "{outcome}");
    }
    assert_eq!(
        value(&samples, "hopbudget_budget_used_ratio_count", &tax),
        Some(7.0)
    );
    assert_eq!(
        value(&samples, "hopbudget_refused_before_work_total", &tax),
        Some(1.0)
    );
    assert_eq!(
        value(&samples, "hopbudget_deadline_missing_total", &tax),
        Some(1.0)
    );
    assert_eq!(value(&samples, "hopbudget_arrivals_total", &tax), Some(7.0));
    assert_eq!(
        value(&samples, "hopbudget_low_budget_arrivals_total", &tax),
        Some(2.0)
    );
    assert_eq!(
        value(&samples, "hopbudget_late_work_total", &tax),
        Some(1.0)
    );
    assert_eq!(
        value(&samples, "hopbudget_late_work_overrun_ms_sum", &tax),
        Some(75.0)
    );
    assert_eq!(
        value(&samples, "hopbudget_late_work_overrun_ms_count", &tax),
        Some(1.0)
    );
    assert_eq!(
        value(
            &samples,
            "hopbudget_malformed_headers_total",
            &with(("header", "x-request-timeout-ms"))
        ),
        Some(2.0)
    );
    assert_eq!(
        value(
            &samples,
            "hopbudget_malformed_headers_total",
            &with(("header", "grpc-timeout"))
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &samples,
            "hopbudget_queue_expired_total",
            &[("service", "billing"), ("queue", "invoices")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &samples,
            "hopbudget_degraded_total",
            &[tax[0], tax[1], ("path", "stale-rates")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &samples,
            "hopbudget_cache_reads_total",
            &[
                ("service", "tax-prometheus"),
                ("cache", "rates"),
                ("choice", "stale")
            ]
        ),
        Some(1.0)
    );
    let moved = [("service", "tax-prometheus"), ("route", "/moved")];
    assert_eq!(
        value(&samples, "hopbudget_arrivals_total", &moved),
        Some(1.0)
    );
    assert_eq!(
        value(
            &samples,
            "hopbudget_hops_total",
            &[moved[0], moved[1], ("outcome", "completed")]
        ),
        Some(1.0)
    );
    let interned = [("service", "tax-prometheus"), ("route", "/interned")];
    assert_eq!(
        value(&samples, "hopbudget_arrivals_total", &interned),
        Some(2.0)
    );
    let quote = [("service", "tax-prometheus"), ("route", "/tax.Tax/Quote")];
    assert_eq!(
        value(&samples, "hopbudget_low_budget_arrivals_total", &quote),
        Some(1.0)
    );

    // The remaining-budget histogram resolves 0-50 ms finely: 8 ms and 30 ms land in their
    // own 5 ms buckets.
    let bucket = |le: &'static str| {
        value(
            &samples,
            "hopbudget_remaining_at_arrival_ms_bucket",
            &with(("le", le)),
        )
    };
    for le in [
        "1", "2", "5", "10", "15", "20", "25", "30", "35", "40", "45", "50",
    ] {
        assert!(bucket(le).is_some(), "bucket le={le}");
    }
    assert_eq!(bucket("5"), Some(0.0));
    assert_eq!(bucket("10"), Some(1.0));
    assert_eq!(bucket("25"), Some(1.0));
    assert_eq!(bucket("30"), Some(2.0));
    assert_eq!(bucket("50"), Some(2.0));
    assert_eq!(bucket("+Inf"), Some(7.0));
    assert_eq!(
        value(&samples, "hopbudget_remaining_at_arrival_ms_count", &tax),
        Some(7.0)
    );

    // The recording rules parse and name only metrics the endpoint exposes; the low-budget
    // ratio they compute from these counters is 2 of 7.
    #[derive(serde::Deserialize)]
    struct Rules {
        groups: Vec<Group>,
    }
    #[derive(serde::Deserialize)]
    struct Group {
        rules: Vec<Rule>,
    }
    #[derive(serde::Deserialize)]
    struct Rule {
        record: String,
        expr: String,
    }
    let rules: Rules = serde_saphyr::from_str(observe::prometheus::RECORDING_RULES).unwrap();
    let rules = &rules.groups[0].rules;
    assert_eq!(
        rules[0].record,
        "hopbudget:low_budget_arrivals:ratio_rate5m"
    );
    for rule in rules {
        for word in rule
            .expr
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        {
            if word.starts_with("hopbudget_") {
                assert!(
                    types.contains_key(word),
                    "rule {} names unknown {word}",
                    rule.record
                );
            }
        }
    }
    let low = value(&samples, "hopbudget_low_budget_arrivals_total", &tax).unwrap();
    let all = value(&samples, "hopbudget_arrivals_total", &tax).unwrap();
    assert!((low / all - 2.0 / 7.0).abs() < 1e-9);
}
