//! Faults at the bottom of the stack (issue #32, item 10), on the real PostgreSQL server: a
//! backend killed in the middle of a budgeted query by an operator's `pg_terminate_backend`.
//!
//! What the caller must get: an error that says the server ended the connection (not an
//! opaque "db error", not a budget outcome: the budget had time left), a pool that hands the
//! next request a working connection, and nothing that waits out the budget.
#![cfg(feature = "postgres")]

use crate::postgres_support::{
    available, marker, ms, observer, unreachable, url, wait_one_running,
};
use hopbudget::postgres::{BudgetPool, QueryError};
use hopbudget::{HopPolicy, RequestBudget};

fn budget() -> RequestBudget {
    RequestBudget::local(ms(30_000), HopPolicy::DEFAULT)
}

#[tokio::test]
async fn a_backend_killed_mid_query_is_a_clear_error_and_the_pool_recovers() {
    if !available().await {
        return;
    }
    // One connection: the request queued behind the killed one can only get it, or a new one.
    let pool = BudgetPool::connect(&url(), 1).unwrap_or_else(|e| unreachable(e));
    let observer = observer().await;
    let tag = marker("terminated");
    let killed_budget = budget();
    let killed = tokio::spawn({
        let (pool, b) = (pool.clone(), killed_budget.clone());
        let sql = format!("SELECT pg_sleep(20) /* {tag} */");
        async move { pool.query(&b, ms(10), &sql, &[]).await }
    });
    let pid = wait_one_running(&observer, &tag).await;
    let queued = tokio::spawn({
        let pool = pool.clone();
        async move { pool.query(&budget(), ms(10), "SELECT 7", &[]).await }
    });
    while pool.pool().status().waiting == 0 {
        tokio::time::sleep(ms(5)).await;
    }

    let terminated: bool = observer
        .query_one("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap()
        .get(0);
    assert!(terminated, "the operator's kill reached backend {pid}");

    let err = killed.await.unwrap().unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, QueryError::ConnectionLost(_)), "{err:?}");
    assert!(
        text.contains("connection") && text.contains("57P01"),
        "the error says the server ended the connection: {text}"
    );
    assert!(
        text.contains("terminating connection due to administrator command"),
        "the error carries the server's own words: {text}"
    );
    assert_eq!(err.budget(), None, "not a budget outcome: {text}");
    // The error came back at once, while the budget had most of its 30 s left: nothing waited
    // for the deadline, and the budget itself neither expired nor was cancelled.
    assert_eq!(killed_budget.end_cause(), None);

    // The pool recovers: the request that was queued for the dead connection, and the next.
    let rows = queued.await.unwrap().expect("the queued request runs");
    assert_eq!(rows[0].get::<_, i32>(0), 7);
    let rows = pool
        .query(&budget(), ms(10), "SELECT 8", &[])
        .await
        .unwrap();
    assert_eq!(rows[0].get::<_, i32>(0), 8);
    let status = pool.pool().status();
    assert_eq!((status.size, status.available), (1, 1), "{status:?}");
}
