//! Budget-aware PostgreSQL: the server learns the deadline, and work that cannot finish never
//! starts (rules C3, C4, C5).
//!
//! Run against the local server (trust auth, database `test`; `DATABASE_URL` overrides):
//!
//! ```sh
//! cargo run -p hopbudget-examples --all-features --example postgres_budget
//! ```
//!
//! It runs four requests and prints what became of each: a quick query that fits its budget,
//! a report refused before a single byte was sent, a 5 s `pg_sleep` that the server stops at
//! the budget (`SET LOCAL statement_timeout`), and one whose caller goes away mid-query, which
//! sends a real cancel request. The pool's status at the end shows every connection idle: the one
//! that was sent the cancel is closed rather than reused (rule C22).

use std::time::{Duration, Instant};

use hopbudget::postgres::BudgetPool;
use hopbudget::{HopPolicy, RequestBudget};

const MS: fn(u64) -> Duration = Duration::from_millis;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let pool = BudgetPool::connect(&url, 4)?;
    let budget = |ms| RequestBudget::local(MS(ms), HopPolicy::DEFAULT);

    // 1. A lookup that usually takes 5 ms, with 300 ms left.
    let started = Instant::now();
    let rows = pool
        .query(&budget(300), MS(5), "SELECT 40 + $1::int", &[&2i32])
        .await?;
    println!(
        "lookup:  answered {} in {:?}",
        rows[0].get::<_, i32>(0),
        started.elapsed()
    );

    // 2. A report that needs 4 s, with 300 ms left: refused before start.
    let err = pool
        .query(
            &budget(300),
            Duration::from_secs(4),
            "SELECT pg_sleep(4)",
            &[],
        )
        .await
        .unwrap_err();
    println!("report:  {err}");

    // 3. A statement that would run 5 s, with 300 ms left: the server stops it.
    let started = Instant::now();
    let err = pool
        .query(&budget(300), MS(10), "SELECT pg_sleep(5)", &[])
        .await
        .unwrap_err();
    println!("sleep:   {err} after {:?}", started.elapsed());

    // 4. The caller goes away 200 ms into a 5 s statement: a cancel request stops it.
    let b = budget(10_000);
    let query = tokio::spawn({
        let (pool, b) = (pool.clone(), b.clone());
        async move { pool.query(&b, MS(10), "SELECT pg_sleep(5)", &[]).await }
    });
    tokio::time::sleep(MS(200)).await;
    b.cancel();
    println!("cancel:  {}", query.await?.unwrap_err());

    let status = pool.pool().status();
    println!(
        "pool:    {} of {} connections idle",
        status.available, status.size
    );
    Ok(())
}
