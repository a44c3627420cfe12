//! A cancel reaches only its own work (rule C22, scenario S19, issue #32), on the real
//! PostgreSQL server.
//!
//! A PostgreSQL cancel request names a backend, not a statement, and the server acts on it
//! whenever it gets round to it: the client never learns when. A connection that was sent one
//! and then handed to the next request lets that cancel kill the next request's statement
//! with 57014 "canceling statement due to user request". Each test here gives the pool one
//! connection, so the request that waits for it gets the very connection (or its replacement)
//! the budget that ended used, over many rounds because the race is the server's.
#![cfg(feature = "postgres")]

use std::time::Duration;

use crate::postgres_support::{available, marker, ms, unreachable, url};
use hopbudget::postgres::{BudgetPool, QueryError, Transaction};
use hopbudget::{BudgetError, HopPolicy, RequestBudget};

/// Rounds of the drop path: before the fix, 12 of 20 failed.
const ROUNDS: usize = 20;

/// Rounds of S19: before the fix, 1 to 7 of 20 failed (0 in one run of five), so more rounds.
const S19_ROUNDS: usize = 30;

/// What the waiting request runs: long enough that a cancel arriving a few milliseconds late
/// finds it running, short enough for twenty rounds.
const SECOND: &str = "SELECT pg_sleep(0.2)";

fn one_connection_pool() -> BudgetPool {
    BudgetPool::connect(&url(), 1).unwrap_or_else(|e| unreachable(e))
}

/// Wait (up to 5 s) until a request is queued for the pool's connection.
async fn wait_queued(pool: &BudgetPool) {
    for _ in 0..500 {
        if pool.pool().status().waiting > 0 {
            return;
        }
        tokio::time::sleep(ms(10)).await;
    }
    panic!(
        "nothing queued for the connection: {:?}",
        pool.pool().status()
    );
}

fn check(failures: Vec<(usize, QueryError)>, rounds: usize) {
    let lines: Vec<String> = failures
        .iter()
        .map(|(round, e)| format!("round {round}: {e} ({e:?})"))
        .collect();
    assert!(
        lines.is_empty(),
        "{} statements failed in {rounds} rounds:\n{}",
        lines.len(),
        lines.join("\n")
    );
}

/// S19 as a user met it: hop margin 0, so the server's `statement_timeout` (the forward
/// budget) ends the first statement a millisecond or so before its 300 ms deadline, and the
/// deadline's cancel races the server's answer; the second request, with 4.7 s left, waits for
/// the only connection.
#[tokio::test]
async fn a_late_cancel_never_kills_the_next_requests_statement() {
    if !available().await {
        return;
    }
    let pool = one_connection_pool();
    let tag = marker("late_cancel");
    let first_sql = format!("SELECT pg_sleep(5) /* {tag} */");
    let policy = HopPolicy {
        hop_margin: Duration::ZERO,
        ..HopPolicy::DEFAULT
    };
    let mut failures = Vec::new();
    for round in 0..S19_ROUNDS {
        let first = RequestBudget::local(ms(300), policy);
        let second = RequestBudget::local(ms(5_000), policy);
        let first_query = pool.query(&first, ms(10), &first_sql, &[]);
        let second_query = async {
            wait_queued_or_started(&pool).await;
            pool.query(&second, ms(10), SECOND, &[]).await
        };
        let (first_result, second_result) = tokio::join!(first_query, second_query);
        // The first request expires; a cancel left over from the round before would make it
        // a database error instead, which counts as a failure too.
        match first_result {
            Err(e) if e.budget() == Some(BudgetError::Expired) => {}
            Err(e) => failures.push((round, e)),
            Ok(rows) => panic!("round {round}: a 5 s sleep in 300 ms answered {rows:?}"),
        }
        if let Err(e) = second_result {
            failures.push((round, e));
        }
    }
    check(failures, S19_ROUNDS);
}

/// Let the first request take the connection before the second asks for it.
async fn wait_queued_or_started(pool: &BudgetPool) {
    for _ in 0..500 {
        let s = pool.pool().status();
        if s.size == 1 && s.available == 0 {
            return;
        }
        tokio::time::sleep(ms(1)).await;
    }
    panic!(
        "the first request never took the connection: {:?}",
        pool.pool().status()
    );
}

/// The drop path: the caller's future is dropped while its transaction holds the connection
/// (here between two statements, where no one can tell whether a statement is in flight), so
/// a cancel request is sent; the request queued for the connection must not receive it.
#[tokio::test]
async fn a_dropped_transactions_cancel_never_kills_the_next_requests_statement() {
    if !available().await {
        return;
    }
    let pool = one_connection_pool();
    let mut failures = Vec::new();
    for round in 0..ROUNDS {
        let (started_tx, started) = tokio::sync::oneshot::channel::<()>();
        let first = tokio::spawn({
            let pool = pool.clone();
            async move {
                let b = RequestBudget::local(ms(30_000), HopPolicy::DEFAULT);
                pool.transaction(&b, ms(10), async move |tx: &Transaction<'_>| {
                    tx.execute("SELECT 1", &[]).await?;
                    let _ = started_tx.send(());
                    // The caller's other work, which it never finishes: it goes away first.
                    std::future::pending::<()>().await;
                    Ok(())
                })
                .await
            }
        });
        started
            .await
            .expect("the first transaction ran its statement");
        let second = tokio::spawn({
            let pool = pool.clone();
            async move {
                let b = RequestBudget::local(ms(5_000), HopPolicy::DEFAULT);
                pool.query(&b, ms(10), SECOND, &[]).await
            }
        });
        wait_queued(&pool).await;
        first.abort();
        assert!(first.await.unwrap_err().is_cancelled(), "round {round}");
        if let Err(e) = second.await.unwrap() {
            failures.push((round, e));
        }
    }
    check(failures, ROUNDS);
}
