//! Work that leaves the request's task: spawned children, blocking jobs, and background work
//! that outlives the response (C7, C11, C12, S11).
//!
//! Run: `cargo run -p hopbudget-examples --example background`
//!
//! An axum handler behind `ServerBudgetLayer`, with a 200 ms budget, starts three kinds of
//! work:
//!
//! - `hopbudget::spawn_blocking`: CPU-bound pricing on tokio's blocking pool; it reads the
//!   ambient budget and can check it between steps.
//! - `hopbudget::spawn`: a child task (recommendations, 5 s of work) that the handler does
//!   not wait for. It carries a child budget and is stopped when the request ends (its answer
//!   went out), not 5 s later.
//! - `hopbudget::spawn_detached`: the confirmation e-mail. Its own 30 s budget is rooted when
//!   it is scheduled, so it is not cancelled when the response goes out, and it keeps the
//!   link to the request that scheduled it.
//!
//! The program prints when each piece ended, relative to the response.

use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::post;
use hopbudget::http::server::ServerBudgetLayer;
use hopbudget::{BudgetError, Profile, RequestBudget};
use hopbudget_examples::serve_http;

fn log(start: Instant, what: impl std::fmt::Display) {
    println!("{:>5} ms  {what}", start.elapsed().as_millis());
}

async fn order(budget: RequestBudget) -> Result<String, BudgetError> {
    let start = Instant::now();
    log(
        start,
        format_args!("handler: {} ms left", budget.remaining().as_millis()),
    );

    // Blocking work sees the request's budget and can refuse a step it cannot finish.
    let total = hopbudget::spawn_blocking(|| {
        let budget = RequestBudget::current().expect("the budget is ambient here too");
        budget.admit(Duration::from_millis(5))?;
        std::thread::sleep(Duration::from_millis(20)); // the CPU-bound pricing
        Ok::<u64, BudgetError>(2_500)
    })
    .flatten() // one result: the job's own refusal, or the budget's end
    .await?;
    log(
        start,
        format_args!("pricing done on the blocking pool: {total} cents"),
    );

    // A child of the request: not awaited, and stopped with the request, not after 5 s.
    let recommendations = hopbudget::spawn(async {
        tokio::time::sleep(Duration::from_secs(5)).await;
    });
    tokio::spawn(async move {
        match recommendations.await {
            // The request ends when its answer has gone out (or at its deadline, if that
            // comes first); its children end with it.
            Err(stop) => log(
                start,
                format_args!("recommendations stopped with the request ({stop})"),
            ),
            Ok(()) => log(start, "recommendations finished"),
        }
    });

    // Background work under its own deadline, rooted now.
    let email = hopbudget::spawn_detached(Duration::from_secs(30), async move {
        let own = RequestBudget::current().expect("detached work has its own budget");
        let left = own.remaining().as_millis();
        tokio::time::sleep(Duration::from_millis(400)).await; // talk to the mail server
        (left, own.linked_from())
    });
    tokio::spawn(async move {
        match email.await {
            Ok((left, parent)) => log(
                start,
                format_args!(
                    "confirmation e-mail sent, after the response; it started with {left} ms of \
                     its own, linked from budget {:?}",
                    parent.map(|id| id.get())
                ),
            ),
            Err(stop) => log(start, format_args!("confirmation e-mail not sent: {stop}")),
        }
    });

    // The order takes the rest of its time before it answers.
    tokio::time::sleep(Duration::from_millis(150)).await;
    log(start, "handler: answering");
    Ok(format!("order placed, {total} cents"))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = serve_http(Router::new().route("/order", post(order)).layer(
        ServerBudgetLayer::new(Profile::default().with_service("orders")),
    ))
    .await?;

    let res = reqwest::Client::new()
        .post(format!("http://{addr}/order"))
        .header("x-request-timeout-ms", "200")
        .send()
        .await?;
    println!("client: {} {}", res.status(), res.text().await?);
    // Give the background work time to report.
    tokio::time::sleep(Duration::from_millis(700)).await;
    Ok(())
}
