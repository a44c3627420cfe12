//! S14 with a client that is not Rust: Node.js's `http` module sends its headers, then its
//! body a moment later. The server layer refuses before the handler (the route needs 200 ms,
//! the client has 120 ms), so the 503 is written before the body is read; the client must
//! receive that 503 every time, not a broken pipe or a reset (C18), on fresh and on kept-alive
//! connections, for bodies up to the 1 MiB the layer drains.
//!
//! Needs `node` (set `HOPBUDGET_NODE` to its path; default `node` on the `PATH`). Without it
//! the test says so and passes, unless `HOPBUDGET_REQUIRE_SERVICES=1` (CI), where it fails.
#![cfg(feature = "axum")]

mod http_support;

use std::path::PathBuf;

use axum::Router;
use axum::body::Bytes;
use axum::routing::post;
use hopbudget::http::server::ServerBudgetLayer;

fn node() -> Option<String> {
    let node = std::env::var("HOPBUDGET_NODE").unwrap_or_else(|_| "node".into());
    let found = std::process::Command::new(&node)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some(node);
    }
    let message = format!(
        "Node.js not found as `{node}`: install node (the machines carry node 20) or set \
         HOPBUDGET_NODE to its path"
    );
    assert!(
        std::env::var("HOPBUDGET_REQUIRE_SERVICES").as_deref() != Ok("1"),
        "{message}"
    );
    eprintln!("skipped: {message}");
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s14_node_http_client_writing_its_body_late_receives_the_503() {
    let Some(node) = node() else {
        return;
    };
    let p = http_support::profile("service: tax\nroutes: [{path: /tax, min_budget_ms: 200}]");
    let url = http_support::serve(
        Router::new()
            .route(
                "/tax",
                post(|body: Bytes| async move { format!("{}", body.len()) }),
            )
            .layer(ServerBudgetLayer::new(p)),
    )
    .await;
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop/node_early_refusal.js");
    for (body_bytes, agent) in [
        ("16", "fresh"),
        ("262144", "fresh"),
        ("16", "keep-alive"),
        // The layer drains at most 1 MiB of an unread body before it closes (C18); a larger
        // body may still see the close as a reset, by design.
        ("524288", "keep-alive"),
    ] {
        let out = tokio::process::Command::new(&node)
            .arg(&script)
            .args([&format!("{url}/tax"), "120", body_bytes, "40", agent])
            .output()
            .await
            .expect("node runs");
        assert!(
            out.status.success(),
            "node failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let tally: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
        assert_eq!(
            tally,
            serde_json::json!({"status": {"503": 40}, "error": {}}),
            "a {body_bytes}-byte body sent after the headers ({agent} connections): every round \
             must see the 503"
        );
    }
}
