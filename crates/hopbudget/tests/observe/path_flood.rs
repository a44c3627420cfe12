//! S15, rule C20: 100,000 distinct unknown paths against a real axum server with a Prometheus
//! recorder leave the rendered metrics and the process's memory flat.
//!
//! Every unknown path lands in axum's fallback, which the server layer wraps too; its route
//! label must be the shared `other`, never the raw path. The test measures the rendered output
//! and the resident set size after a warm-up of 1,000 unknown paths and again after 100,000
//! more, and bounds the growth: counter values gain digits, nothing else may grow. A per-path
//! label would add about 100 bytes of output per path (about 10 MB) and a key-cache entry each.
//!
//! The resident set size is the whole process's, so the test runs in a process of its own
//! (`support/own_process.rs`), where it is the only test and its recorder the binary's one
//! (`metrics_support::recorder()`).
#![cfg(all(feature = "axum", feature = "prometheus"))]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::routing::get;
use hopbudget::http::server::ServerBudgetLayer;

use crate::http_support;

/// Resident set size of this process, from `/proc/self/status` (Linux).
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Send `count` requests to `/flood/<start + i>` (all unknown), 16 at a time over kept-alive
/// connections; every one must be answered (404 from the fallback).
async fn flood(base: &str, start: u64, count: u64) {
    let client = reqwest::Client::new();
    let next = Arc::new(AtomicU64::new(start));
    let end = start + count;
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let (client, next, base) = (client.clone(), next.clone(), base.to_owned());
        workers.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= end {
                    return;
                }
                let res = client
                    .get(format!("{base}/flood/{i}/x{}", i * 7919))
                    .header("x-request-timeout-ms", "2000")
                    .send()
                    .await
                    .expect("the server answers");
                assert_eq!(res.status(), 404);
            }
        });
    }
    while let Some(done) = workers.join_next().await {
        done.expect("worker");
    }
}

#[test]
fn s15_a_flood_of_unknown_paths_leaves_metrics_and_memory_flat() {
    if !crate::own_process::run_alone(
        "path_flood::s15_a_flood_of_unknown_paths_leaves_metrics_and_memory_flat",
    ) {
        return;
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(flood_and_measure());
}

/// The test itself, alone in its process.
async fn flood_and_measure() {
    let handle = crate::metrics_support::recorder();
    let profile =
        http_support::profile("service: flood\nroutes: [{path: /known, min_budget_ms: 20}]");
    let base = http_support::serve(
        Router::new()
            .route("/known", get(|| async { "ok" }))
            .layer(ServerBudgetLayer::new(profile)),
    )
    .await;

    flood(&base, 0, 1_000).await;
    let warm_text = handle.render();
    let warm_rss = rss_bytes();

    flood(&base, 1_000, 100_000).await;
    let text = handle.render();
    let rss = rss_bytes();

    assert!(
        !text.contains("/flood/"),
        "a raw path became a label:\n{}",
        text.lines().find(|l| l.contains("/flood/")).unwrap_or("")
    );
    assert!(
        text.contains("route=\"other\""),
        "unknown paths share the `other` label:\n{text}"
    );
    let grew = text.len().saturating_sub(warm_text.len());
    assert!(
        grew <= 4 * 1024,
        "the metrics output grew by {grew} bytes ({} -> {}) over 100,000 distinct paths",
        warm_text.len(),
        text.len()
    );
    let rss_grew = rss.saturating_sub(warm_rss);
    assert!(
        rss_grew <= 16 * 1024 * 1024,
        "resident memory grew by {} KiB ({} -> {} KiB) over 100,000 distinct paths",
        rss_grew / 1024,
        warm_rss / 1024,
        rss / 1024
    );
    eprintln!(
        "S15: metrics output {} -> {} bytes, RSS {} -> {} KiB over 100,000 unknown paths",
        warm_text.len(),
        text.len(),
        warm_rss / 1024,
        rss / 1024
    );
}
