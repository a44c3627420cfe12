//! Degrade instead of fail: the reco-scorer's full model needs 180 ms; with less left it
//! answers from its stale cached model in 5 ms rather than starting work it cannot finish.
//!
//! ```sh
//! cargo run -p hopbudget-examples --all-features --example degrade
//! ```
//!
//! Each request's choice is on its `degrade` span (`degrade.choice`) and cheaper paths are
//! counted in `hopbudget_degraded_total{service, route, path}`; the example installs a
//! Prometheus recorder and prints that counter at the end.

use std::time::Duration;

use hopbudget::degrade::Degrade;
use hopbudget::{HopPolicy, RequestBudget};

const MS: fn(u64) -> Duration = Duration::from_millis;
const FULL_MODEL: Duration = Duration::from_millis(180);

async fn full_model() -> &'static str {
    tokio::time::sleep(FULL_MODEL).await;
    "scores from the current model"
}

async fn stale_model() -> &'static str {
    tokio::time::sleep(MS(5)).await;
    "scores from the cached model"
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let recorder = hopbudget::observe::prometheus::builder()?.build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)?;

    let stale = Degrade::new("reco-scorer", "/hopbudget.demo.Hop/Call", "stale-model");
    for left in [500, 200, 120, 40] {
        let budget = RequestBudget::local(MS(left), HopPolicy::DEFAULT);
        let (choice, scores) = stale
            .run(&budget, FULL_MODEL, full_model, stale_model)
            .await;
        println!(
            "{left:>3} ms left: {:<5} path, {scores}, {} ms to spare",
            choice.as_str(),
            budget.remaining().as_millis()
        );
    }
    for line in handle.render().lines() {
        if line.starts_with("hopbudget_degraded_total") {
            println!("{line}");
        }
    }
    Ok(())
}
