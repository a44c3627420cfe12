//! The JSON recipe of the guide's observability page (issue #50 item 9): tracing-subscriber's
//! `json` formatter, events flattened, no spans. The hop line comes out as one object whose
//! top-level keys are the line's fields, numbers as numbers, through a real axum server
//! behind the layer and reqwest over loopback.

use std::sync::{Arc, Mutex};

use serde_json::Value;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;

/// Every line written, kept for the test.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(all(feature = "axum", feature = "reqwest"))]
#[tokio::test]
async fn the_json_recipe_writes_the_hop_line_fields_at_the_top_level() {
    use axum::Router;
    use axum::routing::get;
    use hopbudget::http::server::ServerBudgetLayer;

    let lines = Lines::default();
    let sink = lines.clone();
    // As in the guide, with a writer the test reads instead of stdout and `set_default`
    // instead of `init`.
    let subscriber = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_writer(move || sink.clone())
        .finish()
        .with(Targets::new().with_default(tracing::Level::INFO));
    let _guard = tracing::subscriber::set_default(subscriber);

    // No notices: their rate limit is the process's, and `trace.rs` counts the refusal
    // notices of its own requests in this binary.
    let profile = hopbudget::Profile::from_yaml(
        "service: tax\nlog: {hops: true, notices_per_s: 0}\nroutes: [{path: /short, min_budget_ms: 200}]",
        "test.yaml",
    )
    .unwrap();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .route("/short", get(|| async { "never" }))
        .layer(ServerBudgetLayer::new(profile));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = reqwest::Client::new();
    for (path, budget, status) in [("/", "300", 200), ("/short", "50", 503)] {
        let answer = client
            .get(format!("{url}{path}"))
            .header("x-request-timeout-ms", budget)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), status, "{path}");
    }

    let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    let hops: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .filter(|line: &Value| line["target"] == "hopbudget::hop")
        .collect();
    assert_eq!(hops.len(), 2, "{text}");
    let keys = |line: &Value| -> Vec<String> {
        let mut keys: Vec<String> = line.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    };
    assert_eq!(
        keys(&hops[0]),
        [
            "budget_ms",
            "http_status",
            "level",
            "message",
            "outcome",
            "protocol",
            "route",
            "service",
            "source",
            "target",
            "timestamp",
            "used_ms"
        ],
        "{text}"
    );
    assert_eq!(hops[0]["message"], "hop ended");
    assert_eq!(hops[0]["service"], "tax");
    assert_eq!(hops[0]["route"], "/");
    assert_eq!(hops[0]["outcome"], "completed");
    assert_eq!(hops[0]["http_status"], 200);
    assert!(
        hops[0]["budget_ms"].as_u64().is_some_and(|ms| ms <= 300),
        "{text}"
    );
    assert_eq!(hops[1]["outcome"], "refused");
    assert_eq!(hops[1]["required_ms"], 200);
}
