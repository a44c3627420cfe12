//! A read-through Redis cache that serves stale when a recompute cannot finish in the budget.
//!
//! Run against the local Redis (`REDIS_URL` overrides `redis://127.0.0.1:6379`):
//!
//! ```sh
//! cargo run -p hopbudget-examples --all-features --example redis_stale
//! ```
//!
//! Recomputing the price list takes 250 ms. The example reads one key four times: a miss with
//! a roomy budget (recomputed), a fresh hit, then, once the value is past its freshness, a
//! read with only 80 ms left (served stale, marked so, no recompute started) and one with a
//! second left (recomputed).

use std::time::Duration;

use hopbudget::redis::StaleCache;
use hopbudget::{HopPolicy, RequestBudget};

const MS: fn(u64) -> Duration = Duration::from_millis;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let mut conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let key = format!("hopbudget:example:prices:{}", std::process::id());
    let cache = StaleCache::new(conn.clone(), "catalog", "prices")
        .fresh_for(MS(500))
        .stale_for(Duration::from_secs(60));
    // Each recompute that actually runs makes a new version of the price list.
    let version = std::sync::atomic::AtomicU32::new(0);
    let recompute = || {
        async || {
            tokio::time::sleep(MS(250)).await; // the expensive query behind the cache
            let v = version.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            Ok::<_, std::convert::Infallible>(format!("price list v{v}"))
        }
    };
    let budget = |ms| RequestBudget::local(MS(ms), HopPolicy::DEFAULT);

    for (what, left) in [
        ("miss", 1_000),
        ("hit", 80),
        ("stale", 80),
        ("stale", 1_000),
    ] {
        if what == "stale" {
            tokio::time::sleep(MS(600)).await; // past its freshness
        }
        let got = cache.get(&budget(left), &key, MS(250), recompute()).await?;
        println!(
            "{what:>5} with {left:>4} ms left: {:<14} ({})",
            got.value,
            got.choice.as_str()
        );
    }
    redis::cmd("DEL")
        .arg(&key)
        .query_async::<()>(&mut conn)
        .await?;
    Ok(())
}
