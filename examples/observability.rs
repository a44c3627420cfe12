//! Prometheus metrics and OTLP traces of every hop (C14).
//!
//! Run: `cargo run -p hopbudget-examples --example observability`
//!
//! Installs hopbudget's Prometheus recorder (`observe::prometheus::builder`, with buckets that
//! resolve the last 50 ms of a budget) and the OTLP JSON file export (`observe::otlp::install`,
//! which keeps the hops' spans and drops HTTP/2 internals). Then it sends five requests to an
//! axum service behind `ServerBudgetLayer`: completed, refused before start, expired, without
//! a deadline (the edge total applies, C8), and with a malformed deadline header (400, C9).
//! It prints the hopbudget lines of the `/metrics` text and each exported span with its
//! `deadline.*` attributes, read back with `otlp::read`.

use std::collections::HashMap;
use std::time::Duration;

use axum::Router;
use axum::extract::Query;
use axum::routing::get;
use hopbudget::Profile;
use hopbudget::http::server::ServerBudgetLayer;
use hopbudget::observe::otlp::{self, proto};
use hopbudget_examples::serve_http;
use tracing::Instrument;

async fn tax(Query(q): Query<HashMap<String, u64>>) -> &'static str {
    // The application's own span: exported as a child of the hop's.
    let work = Duration::from_millis(q.get("work_ms").copied().unwrap_or(5));
    tokio::time::sleep(work)
        .instrument(tracing::info_span!("db.query"))
        .await;
    "ok"
}

fn attribute(value: &Option<proto::AnyValue>) -> String {
    match value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(proto::Value::StringValue(s)) => s.clone(),
        Some(proto::Value::IntValue(i)) => i.to_string(),
        other => format!("{other:?}"),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let metrics = hopbudget::observe::prometheus::builder()?.install_recorder()?;
    hopbudget::observe::describe_metrics();
    let path = std::env::temp_dir().join(format!(
        "hopbudget-observability-{}.jsonl",
        std::process::id()
    ));
    let traces = otlp::install(&path, "tax")?;

    let profile = Profile::from_yaml(
        "service: tax\nroutes: [{path: /tax, min_budget_ms: 100}]\n",
        "tax.yaml",
    )?;
    let addr = serve_http(
        Router::new()
            .route("/tax", get(tax))
            .layer(ServerBudgetLayer::new(profile)),
    )
    .await?;

    let client = reqwest::Client::new();
    for (what, header, work_ms) in [
        ("completed", Some("500"), 5),
        ("refused: 80 ms, the route needs 100", Some("80"), 5),
        ("expired: 150 ms, the work takes 1 s", Some("150"), 1_000),
        ("no deadline header: edge total", None, 5),
        ("malformed deadline header", Some("soon"), 5),
    ] {
        let mut req = client.get(format!("http://{addr}/tax?work_ms={work_ms}"));
        if let Some(h) = header {
            req = req.header("x-request-timeout-ms", h);
        }
        let res = req.send().await?;
        println!("{what:<40} -> {}", res.status());
    }

    println!("\n/metrics (hopbudget counters):");
    for line in metrics.render().lines() {
        if line.starts_with("hopbudget_") && !line.contains("_bucket") {
            println!("  {line}");
        }
    }

    traces.shutdown()?;
    println!("\nspans exported to {}:", path.display());
    for request in otlp::read(&path)? {
        for span in request
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
        {
            let fields: Vec<String> = span
                .attributes
                .iter()
                .filter(|kv| kv.key.starts_with("deadline."))
                .map(|kv| format!("{}={}", kv.key, attribute(&kv.value)))
                .collect();
            println!("  {:<9} {}", span.name, fields.join(" "));
        }
    }
    std::fs::remove_file(&path)?;
    Ok(())
}
