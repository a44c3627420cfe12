//! `deploy/grafana/hopbudget.json` as written (issue #50 item 4): the datasource and the
//! `service` and `route` variables every query goes through, the panels the issue names, the
//! default-timeout buckets marked on the duration histogram, and only metrics hopbudget
//! exposes. That each query returns series on real data is `operators/prometheus_live.rs`.

use crate::support::dashboard;
use hopbudget::observe::{self, prometheus::DEFAULT_TIMEOUTS_MS, prometheus::DURATION_BUCKETS_MS};
use serde_json::Value;

const DATASOURCE: &str = "${datasource}";

/// The Prometheus datasource is a variable, and so are `service` and `route`, each from
/// `label_values` over a hopbudget metric, with `All` meaning `.*` (what the queries'
/// `=~"$service"` needs). Every panel and every query reads the datasource variable, and
/// every query filters by service.
#[test]
fn every_query_goes_through_the_datasource_service_and_route_variables() {
    let dashboard = dashboard::dashboard();
    let schema = dashboard["schemaVersion"].as_u64().unwrap();
    assert!((36..=41).contains(&schema), "schemaVersion {schema}");
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    let variable = |name: &str| -> &Value {
        variables
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no variable {name}"))
    };
    let datasource = variable("datasource");
    assert_eq!(
        (&datasource["type"], &datasource["query"]),
        (&Value::from("datasource"), &Value::from("prometheus"))
    );
    for name in ["service", "route"] {
        let v = variable(name);
        assert_eq!(v["type"], "query", "{name}");
        assert_eq!(v["datasource"]["uid"], DATASOURCE, "{name}");
        assert_eq!(
            (&v["includeAll"], &v["allValue"]),
            (&Value::from(true), &Value::from(".*")),
            "{name}"
        );
        let query = v["query"]["query"].as_str().unwrap();
        assert!(
            query.starts_with("label_values(hopbudget_") && query.ends_with(&format!(", {name})")),
            "{name}: {query}"
        );
    }

    let panels = dashboard::panels(&dashboard);
    let mut ids: Vec<u64> = panels.iter().map(|p| p["id"].as_u64().unwrap()).collect();
    ids.sort_unstable();
    let count = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), count, "panel ids are unique");
    for panel in &panels {
        let title = &panel["title"];
        assert_eq!(panel["datasource"]["uid"], DATASOURCE, "{title}");
        assert!(
            panel["description"].as_str().is_some_and(|d| d.len() > 40),
            "{title}: a description"
        );
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title}");
        for target in targets {
            assert_eq!(target["datasource"]["uid"], DATASOURCE, "{title}");
            let expr = target["expr"].as_str().unwrap();
            assert!(expr.contains("service=~\"$service\""), "{title}: {expr}");
        }
    }
}

/// The panels issue #50 asks for, each found by what it draws: the budget at arrival as a
/// heatmap repeated per service, outcomes, refusals with low-budget arrivals, late work, the
/// duration histogram with the bucket around each default timeout in red, the rollout table,
/// and the calls sent with no deadline by callee.
#[test]
fn the_dashboard_has_each_panel_operators_look_at() {
    let dashboard = dashboard::dashboard();
    let panels = dashboard::panels(&dashboard);
    let exprs = |panel: &Value| -> String {
        panel["targets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["expr"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let find = |kind: &str, reads: &[&str]| -> Value {
        panels
            .iter()
            .find(|p| p["type"] == kind && reads.iter().all(|r| exprs(p).contains(r)))
            .unwrap_or_else(|| panic!("no {kind} panel reading {reads:?}"))
            .clone()
    };
    let heatmap = find("heatmap", &["hopbudget_remaining_at_arrival_ms_bucket"]);
    assert_eq!(heatmap["repeat"], "service", "one heatmap per service");
    assert_eq!(heatmap["targets"][0]["format"], "heatmap");
    find("timeseries", &["hopbudget_hops_total", "outcome"]);
    find(
        "timeseries",
        &[
            "hopbudget_refused_before_work_total",
            "hopbudget_low_budget_arrivals_total",
        ],
    );
    find(
        "timeseries",
        &[
            "hopbudget_late_work_total",
            "hopbudget_late_work_overrun_ms_bucket",
        ],
    );
    find(
        "timeseries",
        &["hopbudget_hop_duration_ms_count", "default_ms"],
    );

    // The histogram: one bar per bucket, and each bucket from 0.95T to 1.05T (named by its
    // upper bound, `le`) in red.
    let histogram = find("bargauge", &["hopbudget_hop_duration_ms_bucket"]);
    assert_eq!(histogram["targets"][0]["format"], "heatmap");
    assert_eq!(histogram["targets"][0]["legendFormat"], "{{le}}");
    let overrides = histogram["fieldConfig"]["overrides"].as_array().unwrap();
    for t in DEFAULT_TIMEOUTS_MS {
        let le = t * 1.05;
        assert!(DURATION_BUCKETS_MS.contains(&le), "{le}");
        let marked = overrides.iter().any(|o| {
            o["matcher"]["options"] == format!("{le}")
                && o["properties"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|p| p["id"] == "color" && p["value"]["fixedColor"] == "red")
        });
        assert!(
            marked,
            "the bucket up to {le} ms (default {t} ms) is not marked"
        );
    }

    // Calls sent with no deadline, per caller and callee (the label the client layers and the
    // sidecar's egress put on the `(outbound)` route).
    find(
        "timeseries",
        &[
            "hopbudget_deadline_missing_total",
            "route=\"(outbound)\"",
            "callee",
        ],
    );

    let rollout = find(
        "table",
        &[
            "hopbudget_deadline_missing_total",
            "hopbudget_arrivals_total",
        ],
    );
    assert!(
        exprs(&rollout).contains("route!=\"(outbound)\""),
        "the share with a deadline counts arrivals, not outbound calls"
    );
}

/// Every `hopbudget_*` name the queries read is a metric hopbudget exposes (a histogram's
/// `_bucket`, `_count` or `_sum`), and every query has no variable left once the test's
/// values are in.
#[test]
fn the_queries_read_only_what_hopbudget_exposes() {
    let dashboard = dashboard::dashboard();
    let queries = dashboard::queries(&dashboard, "5m");
    assert!(queries.len() >= 10, "{queries:?}");
    let mut names: Vec<String> = Vec::new();
    for query in &queries {
        let text = &query.promql;
        let mut rest = text.as_str();
        while let Some(at) = rest.find("hopbudget_") {
            let tail = &rest[at..];
            let len = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            names.push(tail[..len].to_owned());
            rest = &tail[len..];
        }
    }
    names.sort_unstable();
    names.dedup();
    for name in &names {
        let known = observe::METRICS.iter().any(|(metric, ty, _)| {
            name == metric
                || *ty == "histogram"
                    && ["_bucket", "_count", "_sum"]
                        .iter()
                        .any(|suffix| *name == format!("{metric}{suffix}"))
        });
        assert!(known, "{name} is not a metric hopbudget exposes");
    }
    assert!(names.len() >= 8, "{names:?}");
}
