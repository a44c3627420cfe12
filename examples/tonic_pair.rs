//! A tonic server and client, each behind its hopbudget layer.
//!
//! Run: `cargo run -p hopbudget-examples --example tonic_pair`
//!
//! The `shop.Tax` service (`proto/shop.proto`, compiled with protox at build time) runs behind
//! `GrpcServerLayer` with a route rule: `Quote` needs at least 100 ms. The client goes through
//! `GrpcClientLayer`, which stamps `grpc-timeout` from the current budget on every call (C2).
//! It prints five calls: with time to spare, with no budget at all (the profile's edge total
//! applies, C8), too short for the route (refused by the server before the handler, C3), too
//! short to forward at all (refused by the client, nothing sent), and a handler that outlasts
//! the budget (DEADLINE_EXCEEDED, never CANCELLED, C4).

use std::time::Duration;

use hopbudget::{BudgetError, Profile, RequestBudget};
use hopbudget_examples::pb::QuoteRequest;
use hopbudget_examples::{serve_tax, tax_client};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server_profile = Profile::from_yaml(
        "service: tax\nroutes: [{path: /shop.Tax/Quote, min_budget_ms: 100}]\n",
        "tax.yaml",
    )?;
    let addr = serve_tax(server_profile).await?;
    let profile = Profile::default().with_service("checkout");
    let tax = tax_client(profile.clone(), addr);

    let quote = |work_ms| QuoteRequest {
        item: "book".into(),
        cents: 2_500,
        work_ms,
    };
    let cases: [(&str, Option<u64>, u64); 5] = [
        ("400 ms budget", Some(400), 10),
        ("no budget: the edge total applies (C8)", None, 10),
        ("80 ms budget: below the route's 100 ms (C3)", Some(80), 10),
        (
            "12 ms budget: 6 ms to forward, below the 10 ms threshold",
            Some(12),
            10,
        ),
        (
            "300 ms budget, the handler works 1 s (C4)",
            Some(300),
            1_000,
        ),
    ];
    for (what, budget_ms, work_ms) in cases {
        let mut tax = tax.clone();
        let call = tax.quote(quote(work_ms));
        let result = match budget_ms {
            // Inside a request the ambient budget is what a server layer installed; here the
            // edge sets one by hand.
            Some(ms) => {
                RequestBudget::local(Duration::from_millis(ms), profile.policy())
                    .scope(call)
                    .await
            }
            None => call.await,
        };
        match result {
            Ok(reply) => {
                let r = reply.into_inner();
                println!(
                    "{what}\n  -> tax {} cents; the server saw grpc-timeout {} and {} ms left",
                    r.tax_cents, r.grpc_timeout, r.remaining_ms
                );
            }
            Err(status) => {
                let code = status.code();
                match BudgetError::try_from(status) {
                    Ok(err) => println!("{what}\n  -> {code:?}: {err}"),
                    Err(other) => println!("{what}\n  -> not a deadline outcome: {other}"),
                }
            }
        }
    }
    Ok(())
}
