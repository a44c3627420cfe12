//! Fan-out: siblings launched together share one deadline (S8).
//!
//! Run: `cargo run -p hopbudget-examples --example fan_out`
//!
//! An orchestrator calls cart, pricing and inventory in parallel over HTTP (reqwest with
//! `BudgetMiddleware`) inside a `FanOut`. Every sibling starts with the same remaining budget:
//! siblings do not split it, only sequential hops spend it (C2). First, inventory is slow:
//! the shared deadline stops it while cart and pricing have answered. Then pricing fails
//! under `FanOutPolicy::CancelOnError`: the others are cancelled at once, and the leaf sees
//! its work cancelled too, because dropping the call resets the connection (C5, no orphans).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path, Query};
use axum::http::StatusCode;
use axum::routing::get;
use hopbudget::fan_out::{FanOut, FanOutPolicy};
use hopbudget::http::reqwest::BudgetMiddleware;
use hopbudget::http::server::ServerBudgetLayer;
use hopbudget::{DownstreamError, Profile, RequestBudget};
use hopbudget_examples::serve_http;
use reqwest_middleware::ClientBuilder;

/// Prints how a leaf's work ended if it did not run to its end.
struct Unfinished {
    name: String,
    budget: RequestBudget,
    started: Instant,
    done: bool,
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if !self.done {
            println!(
                "    leaf {:<9} stopped after {:>3} ms: {:?}",
                self.name,
                self.started.elapsed().as_millis(),
                self.budget.end_cause()
            );
        }
    }
}

/// One leaf service for every name: works `work_ms`, fails when `fail=1`.
async fn leaf(
    Path(name): Path<String>,
    budget: RequestBudget,
    Query(q): Query<HashMap<String, u64>>,
) -> Result<String, StatusCode> {
    let mut guard = Unfinished {
        name,
        budget,
        started: Instant::now(),
        done: false,
    };
    tokio::time::sleep(Duration::from_millis(
        q.get("work_ms").copied().unwrap_or(10),
    ))
    .await;
    guard.done = true;
    if q.get("fail") == Some(&1) {
        return Err(StatusCode::INTERNAL_SERVER_ERROR);
    }
    Ok(format!("{} ok", guard.name))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let profile = Profile::default();
    let leaves = serve_http(Router::new().route("/{name}", get(leaf)).layer(
        ServerBudgetLayer::new(profile.clone().with_service("leaves")),
    ))
    .await?;
    let http = ClientBuilder::new(reqwest::Client::new())
        .with(BudgetMiddleware::new(profile.clone()))
        .build();

    let runs = [
        (
            "WaitAll, 300 ms budget, inventory takes 2 s",
            300,
            FanOutPolicy::WaitAll,
            [
                ("cart", "work_ms=20"),
                ("pricing", "work_ms=50"),
                ("inventory", "work_ms=2000"),
            ],
        ),
        (
            "CancelOnError, 1 s budget, pricing fails after 50 ms",
            1_000,
            FanOutPolicy::CancelOnError,
            [
                ("cart", "work_ms=20"),
                ("pricing", "work_ms=50&fail=1"),
                ("inventory", "work_ms=2000"),
            ],
        ),
    ];
    for (what, budget_ms, policy, calls) in runs {
        println!("{what}");
        let request = RequestBudget::local(Duration::from_millis(budget_ms), profile.policy());
        let started = Instant::now();
        let mut group = FanOut::new(&request, policy);
        for (name, query) in calls {
            let http = http.clone();
            let url = format!("http://{leaves}/{name}?{query}");
            group.spawn(move |budget| async move {
                let at_start = budget.remaining().as_millis();
                // The sibling's budget is ambient: the middleware forwards it.
                let res = http.get(url).send().await?;
                if !res.status().is_success() {
                    let err: Box<dyn std::error::Error + Send + Sync> =
                        format!("{name} answered {}", res.status()).into();
                    return Err(DownstreamError::from(err));
                }
                Ok(format!(
                    "{} (started with {at_start} ms)",
                    res.text().await?
                ))
            });
        }
        let results = group.join().await;
        println!("  joined after {} ms:", started.elapsed().as_millis());
        for (result, (name, _)) in results.iter().zip(calls) {
            match result {
                Ok(text) => println!("    {name:<9} {text}"),
                Err(e) => println!("    {name:<9} {e}"),
            }
        }
        // Let the leaves report their stopped work before the next run.
        tokio::time::sleep(Duration::from_millis(50)).await;
        println!();
    }
    Ok(())
}
