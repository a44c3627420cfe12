//! Shared by the `operators` tests `grafana_dashboard` and `prometheus_live`: the queries of
//! `deploy/grafana/hopbudget.json` as Prometheus can run them, with Grafana's variables
//! replaced by concrete values.

use std::path::Path;

use serde_json::Value;

/// The dashboard, parsed.
pub fn dashboard() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/grafana/hopbudget.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every panel that draws something (rows left out, and the panels inside collapsed rows
/// included).
pub fn panels(dashboard: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    for panel in dashboard["panels"]
        .as_array()
        .expect("the dashboard has panels")
    {
        if panel["type"] == "row" {
            out.extend(panel["panels"].as_array().cloned().unwrap_or_default());
        } else {
            out.push(panel.clone());
        }
    }
    out
}

/// One query of the dashboard: where it is and the PromQL Prometheus is asked.
#[derive(Debug)]
pub struct Query {
    /// `panel title / refId`, or `variable NAME`.
    pub place: String,
    /// The expression with every variable replaced.
    pub promql: String,
}

/// `expr` with the dashboard's variables as a test runs it: `$service` and `$route` match
/// everything (the `All` choice, whose value is `.*`), and Grafana's interval variables are
/// `range`. A `$` left over is a variable this function does not know: the panel would not
/// run as written, so that fails.
pub fn concrete(expr: &str, range: &str) -> String {
    let mut out = expr.to_owned();
    for (variable, value) in [
        ("${service}", ".*"),
        ("$service", ".*"),
        ("${route}", ".*"),
        ("$route", ".*"),
        ("$__rate_interval", range),
        ("$__interval", range),
        ("$__range", range),
    ] {
        out = out.replace(variable, value);
    }
    assert!(
        !out.contains('$'),
        "a variable the test does not know in: {expr}"
    );
    out
}

/// Every panel's queries and every query variable's, as instant queries over `range`. A
/// variable's `label_values(SELECTOR, LABEL)` becomes `count by (LABEL) (SELECTOR)`, which has
/// a series for each value Grafana would offer.
pub fn queries(dashboard: &Value, range: &str) -> Vec<Query> {
    let mut out = Vec::new();
    for panel in panels(dashboard) {
        for target in panel["targets"].as_array().cloned().unwrap_or_default() {
            let expr = target["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("a target without expr in {}", panel["title"]));
            out.push(Query {
                place: format!("{} / {}", panel["title"], target["refId"]),
                promql: concrete(expr, range),
            });
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if variable["type"] != "query" {
            continue;
        }
        let definition = variable["query"]["query"].as_str().unwrap();
        let inner = definition
            .strip_prefix("label_values(")
            .and_then(|rest| rest.strip_suffix(')'))
            .unwrap_or_else(|| panic!("not a label_values query: {definition}"));
        let (selector, label) = inner
            .rsplit_once(',')
            .unwrap_or_else(|| panic!("label_values without a label: {definition}"));
        out.push(Query {
            place: format!("variable {}", variable["name"]),
            promql: format!(
                "count by ({}) ({})",
                label.trim(),
                concrete(selector.trim(), range)
            ),
        });
    }
    out
}
