//! S9: a hop injected with a remainder below its threshold skips its downstream call, and
//! its trace shows the remaining ms and the `refused` status. The span-capturing subscriber is
//! installed for the test's own (current-thread) runtime only (`set_default`), so the test
//! shares the `http` binary.
#![cfg(all(feature = "axum", feature = "reqwest"))]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::http_support::{SpanCapture, client, fail, profile, serve};
use axum::Router;
use axum::routing::get;
use hopbudget::http::server::ServerBudgetLayer;

#[tokio::test(flavor = "current_thread")]
async fn s9_short_remainder_skips_the_downstream_call_and_the_trace_says_refused() {
    let capture = SpanCapture::default();
    let _subscriber = tracing::subscriber::set_default(capture.clone());

    let leaf_calls = Arc::new(AtomicU64::new(0));
    let leaf = {
        let calls = leaf_calls.clone();
        serve(
            Router::new()
                .route(
                    "/",
                    get(move || {
                        calls.fetch_add(1, Ordering::SeqCst);
                        async { "leaf" }
                    }),
                )
                .layer(ServerBudgetLayer::new(profile("service: leaf"))),
        )
        .await
    };
    let p = profile("service: middle\nrefuse_below_ms: 50");
    let http = client(&p);
    let middle_calls = Arc::new(AtomicU64::new(0));
    let middle = {
        let calls = middle_calls.clone();
        serve(
            Router::new()
                .route(
                    "/",
                    get(move || {
                        calls.fetch_add(1, Ordering::SeqCst);
                        let (http, leaf) = (http.clone(), leaf.clone());
                        async move {
                            match http.get(&leaf).send().await {
                                Ok(res) => (res.status(), res.text().await.unwrap()),
                                Err(e) => fail(&e),
                            }
                        }
                    }),
                )
                .layer(ServerBudgetLayer::new(p.clone())),
        )
        .await
    };

    // 30 ms injected at `middle`, whose threshold is 50 ms: refused at that hop.
    let res = reqwest::Client::new()
        .get(&middle)
        .header("x-request-timeout-ms", "30")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 503);
    assert_eq!(middle_calls.load(Ordering::SeqCst), 0);
    assert_eq!(
        leaf_calls.load(Ordering::SeqCst),
        0,
        "downstream call skipped"
    );

    // 53 ms: `middle` starts (53 >= 50) but its forward budget (47 ms) is below the
    // threshold, so the downstream call is refused locally: no request reaches `leaf`.
    let res = reqwest::Client::new()
        .get(&middle)
        .header("x-request-timeout-ms", "53")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 503, "{}", res.text().await.unwrap());
    assert_eq!(middle_calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        leaf_calls.load(Ordering::SeqCst),
        0,
        "downstream call skipped"
    );

    let hops = capture.spans("hop");
    let refused = hops
        .iter()
        .find(|f| f.get("deadline.outcome").map(String::as_str) == Some("refused"))
        .unwrap_or_else(|| panic!("a refused hop in the trace: {hops:?}"));
    assert_eq!(refused["service.name"], "middle");
    let remaining: u64 = refused["deadline.remaining_ms"].parse().unwrap();
    assert!((20..=30).contains(&remaining), "{refused:?}");
    assert_eq!(refused["deadline.required_ms"], "50");
    assert_eq!(refused["deadline.source"], "relative-ms");
}
