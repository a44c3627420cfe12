//! Budgeted PostgreSQL queries against a real server (rules C3, C4, C5, C7, C21, C22).
//!
//! Needs PostgreSQL at `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`,
//! trust auth). Without it every test here that needs it says how to start it: it fails under
//! `HOPBUDGET_REQUIRE_SERVICES=1` (CI) and is skipped otherwise (`support/postgres.rs`).
//! Each test tags its SQL with a unique marker and watches `pg_stat_activity` from a separate
//! connection to see what the server is really running.
#![cfg(feature = "postgres")]

use std::time::{Duration, Instant};

use hopbudget::postgres::{BudgetPool, QueryError, Transaction};
use hopbudget::{BudgetError, HopPolicy, RequestBudget};

use crate::postgres_support::{available, marker, ms, observer, unreachable, url};

const POOL_SIZE: usize = 4;

fn budget(v: u64) -> RequestBudget {
    RequestBudget::local(ms(v), HopPolicy::DEFAULT)
}

/// A pool with all of its connections open, so "back to full size" means something.
async fn full_pool() -> BudgetPool {
    let pool = BudgetPool::connect(&url(), POOL_SIZE).unwrap_or_else(|e| unreachable(e));
    let mut held = Vec::new();
    for _ in 0..POOL_SIZE {
        held.push(pool.pool().get().await.unwrap_or_else(|e| unreachable(e)));
    }
    drop(held);
    assert_full(&pool);
    pool
}

fn assert_full(pool: &BudgetPool) {
    let status = pool.pool().status();
    assert_eq!(
        (status.size, status.available),
        (POOL_SIZE, POOL_SIZE),
        "every connection back in the pool: {status:?}"
    );
}

/// Wait (up to 5 s) until the pool has all its connections back.
async fn wait_full(pool: &BudgetPool) {
    for _ in 0..100 {
        let s = pool.pool().status();
        if s.size == POOL_SIZE && s.available == POOL_SIZE {
            return;
        }
        tokio::time::sleep(ms(50)).await;
    }
    assert_full(pool);
}

/// Wait (up to 5 s) until the pool has closed the one connection a cancel was sent to (C22)
/// and has every other connection back: nothing is leaked, nothing is reused.
async fn wait_one_discarded(pool: &BudgetPool) {
    for _ in 0..100 {
        let s = pool.pool().status();
        if s.size == POOL_SIZE - 1 && s.available == POOL_SIZE - 1 {
            return;
        }
        tokio::time::sleep(ms(50)).await;
    }
    let status = pool.pool().status();
    assert_eq!(
        (status.size, status.available),
        (POOL_SIZE - 1, POOL_SIZE - 1),
        "the cancelled connection closed, the others back in the pool: {status:?}"
    );
}

/// Every connection the pool can open answers: the one closed after a cancel is replaced.
async fn all_answer(pool: &BudgetPool) {
    let mut held = Vec::new();
    for _ in 0..POOL_SIZE {
        held.push(pool.pool().get().await.unwrap());
    }
    for conn in &held {
        let seven: i32 = conn.query_one("SELECT 7", &[]).await.unwrap().get(0);
        assert_eq!(seven, 7);
    }
}

/// Statements carrying `marker` that the server is executing now.
async fn running(observer: &tokio_postgres::Client, marker: &str) -> i64 {
    observer
        .query_one(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE state = 'active' AND pid <> pg_backend_pid() AND query LIKE '%' || $1 || '%'",
            &[&marker],
        )
        .await
        .unwrap()
        .get(0)
}

/// Wait (up to 5 s) until the server runs `want` statements carrying `marker`.
async fn wait_running(observer: &tokio_postgres::Client, marker: &str, want: i64) {
    for _ in 0..100 {
        if running(observer, marker).await == want {
            return;
        }
        tokio::time::sleep(ms(50)).await;
    }
    assert_eq!(
        running(observer, marker).await,
        want,
        "statements `{marker}`"
    );
}

/// Wait up to `within` until the server no longer runs statements carrying `marker`. The server
/// answers a cancelled statement before it marks its session idle, so an observer may still
/// see the statement active for a moment after the caller has its error; `within` is kept
/// shorter than what is left of each test's sleep, which a statement nobody stopped would
/// still be running.
async fn wait_stopped(observer: &tokio_postgres::Client, marker: &str, within: Duration) {
    let give_up = Instant::now() + within;
    while running(observer, marker).await != 0 && Instant::now() < give_up {
        tokio::time::sleep(ms(5)).await;
    }
    assert_eq!(
        running(observer, marker).await,
        0,
        "the server stopped `{marker}`"
    );
}

fn budget_error(r: Result<impl std::fmt::Debug, QueryError>) -> BudgetError {
    match r {
        Err(QueryError::Budget(e)) => e,
        other => panic!("expected a budget error, got {other:?}"),
    }
}

#[tokio::test]
async fn refused_before_any_connection_or_byte() {
    // A fresh pool opens connections lazily: an untouched pool proves nothing was sent.
    let pool = BudgetPool::connect(&url(), POOL_SIZE).unwrap();
    let err = budget_error(pool.query(&budget(50), ms(200), "SELECT 1", &[]).await);
    let BudgetError::Refused(r) = err else {
        panic!("{err:?}")
    };
    assert_eq!(r.required(), ms(200));
    assert!(r.remaining() <= ms(44), "forward budget, {r}");
    assert_eq!(pool.pool().status().size, 0, "no connection was opened");
}

#[tokio::test]
async fn the_server_cancels_a_sleep_that_would_outlive_its_budget() {
    if !available().await {
        return;
    }
    let pool = full_pool().await;
    let observer = observer().await;
    let tag = marker("outlive");
    // A wide hop margin: the forward budget (the statement timeout) is 294 ms of the 600 ms,
    // so it is the server's timeout that stops the sleep, well before the budget ends.
    let policy = HopPolicy {
        hop_margin: ms(300),
        ..HopPolicy::DEFAULT
    };
    let b = RequestBudget::local(ms(600), policy);
    let started = Instant::now();
    let result = pool
        .query(&b, ms(10), &format!("SELECT pg_sleep(5) /* {tag} */"), &[])
        .await;
    let took = started.elapsed();
    assert_eq!(b.end_cause(), None, "the budget itself had not ended yet");
    let err = result.unwrap_err();
    assert_eq!(err.budget(), Some(BudgetError::Expired), "{err}");
    // Recognisable through the error chain like every other budget error.
    assert_eq!(BudgetError::find(&err), Some(&BudgetError::Expired));
    assert!(
        took < Duration::from_secs(3),
        "waited {took:?} for a 5 s sleep"
    );
    wait_stopped(&observer, &tag, ms(500)).await;
    wait_full(&pool).await;
}

/// C24: with enforcement off the query runs to its end: no statement timeout from the
/// budget, no cancel at its deadline, no refusal for a cost above what is left.
#[tokio::test]
async fn with_enforcement_off_a_query_outlives_its_budget_to_its_end() {
    if !available().await {
        return;
    }
    let pool = full_pool().await;
    let off = HopPolicy {
        enforce: false,
        ..HopPolicy::DEFAULT
    };
    let b = RequestBudget::local(ms(100), off);
    let row = pool
        .query(&b, ms(500), "SELECT pg_sleep(0.4)::text AS slept", &[])
        .await
        .expect("the query ran to its end");
    assert_eq!(row.len(), 1);
    assert_eq!(b.end_cause(), None);
    assert!(b.remaining().is_zero(), "it ran past the budget's deadline");
    wait_full(&pool).await;
}

#[tokio::test]
async fn the_deadline_across_several_statements_cancels_on_the_server() {
    if !available().await {
        return;
    }
    // Each statement fits the statement timeout; together they outlive the budget, so the
    // budget's own deadline fires mid-statement and a cancel request stops the server.
    let pool = full_pool().await;
    let observer = observer().await;
    let tag = marker("several");
    let sql = format!("SELECT pg_sleep(0.25) /* {tag} */");
    let result = pool
        .transaction(&budget(400), ms(10), async |tx: &Transaction<'_>| {
            for _ in 0..4 {
                tx.execute(&sql, &[]).await?;
            }
            Ok(())
        })
        .await;
    assert_eq!(budget_error(result), BudgetError::Expired);
    wait_stopped(&observer, &tag, ms(30)).await;
    wait_one_discarded(&pool).await;
    all_answer(&pool).await;
}

#[tokio::test]
async fn a_cancelled_budget_sends_a_real_cancel_request() {
    if !available().await {
        return;
    }
    let pool = full_pool().await;
    let observer = observer().await;
    let tag = marker("cancel");
    let b = budget(30_000);
    let query = tokio::spawn({
        let (pool, b, sql) = (
            pool.clone(),
            b.clone(),
            format!("SELECT pg_sleep(20) /* {tag} */"),
        );
        async move { pool.query(&b, ms(10), &sql, &[]).await }
    });
    wait_running(&observer, &tag, 1).await;
    b.cancel(); // the caller went away
    let result = query.await.unwrap();
    assert_eq!(budget_error(result), BudgetError::Cancelled);
    wait_stopped(&observer, &tag, ms(500)).await;
    wait_one_discarded(&pool).await;
    all_answer(&pool).await;
}

#[tokio::test]
async fn a_dropped_query_is_cancelled_and_its_connection_closed() {
    if !available().await {
        return;
    }
    let pool = full_pool().await;
    let observer = observer().await;
    let tag = marker("dropped");
    let query = tokio::spawn({
        let (pool, sql) = (pool.clone(), format!("SELECT pg_sleep(20) /* {tag} */"));
        async move { pool.query(&budget(30_000), ms(10), &sql, &[]).await }
    });
    wait_running(&observer, &tag, 1).await;
    query.abort(); // the future is dropped mid-query
    assert!(query.await.unwrap_err().is_cancelled());
    wait_running(&observer, &tag, 0).await;
    // The connection that ran it was sent a cancel: closed, not returned (C22).
    wait_one_discarded(&pool).await;
    all_answer(&pool).await;
}

#[tokio::test]
async fn the_statement_timeout_is_the_forward_budget_and_ends_with_the_transaction() {
    if !available().await {
        return;
    }
    let pool = BudgetPool::connect(&url(), 1).unwrap_or_else(|e| unreachable(e));
    let rows = pool
        .query(&budget(1_000), ms(1), "SHOW statement_timeout", &[])
        .await
        .unwrap();
    let shown: String = rows[0].get(0);
    let value: u64 = shown
        .strip_suffix("ms")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("statement_timeout = {shown}"));
    // 1000 ms minus 5 ms margin and 1 ms transit, less whatever the connection took.
    assert!((1..=994).contains(&value), "{shown}");
    // SET LOCAL: the same (only) connection is back to the server default afterwards.
    let conn = pool.pool().get().await.unwrap();
    let after: String = conn
        .query_one("SHOW statement_timeout", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(after, "0");
}

#[tokio::test]
async fn waiting_for_a_connection_stops_when_the_budget_cannot_cover_the_cost() {
    if !available().await {
        return;
    }
    let pool = BudgetPool::connect(&url(), 1).unwrap_or_else(|e| unreachable(e));
    let held = pool.pool().get().await.unwrap_or_else(|e| unreachable(e));
    let started = Instant::now();
    let err = budget_error(pool.query(&budget(300), ms(100), "SELECT 1", &[]).await);
    assert!(
        matches!(err, BudgetError::Refused(r) if r.required() == ms(100)),
        "{err:?}"
    );
    // It gave up when 100 ms + reserve were left, not at the deadline.
    assert!(started.elapsed() < ms(300), "{:?}", started.elapsed());
    drop(held);
}

#[tokio::test]
async fn a_database_error_stays_a_database_error() {
    if !available().await {
        return;
    }
    let pool = full_pool().await;
    let err = pool
        .query(&budget(1_000), ms(1), "SELECT 1 / 0", &[])
        .await
        .unwrap_err();
    match &err {
        QueryError::Db(e) => assert_eq!(
            e.code(),
            Some(&tokio_postgres::error::SqlState::DIVISION_BY_ZERO)
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(err.budget(), None);
    // What a log line shows says what went wrong, not only "db error" (issue #33).
    assert_eq!(
        err.to_string(),
        "database error: ERROR 22012: division by zero"
    );
    wait_full(&pool).await;
}

#[tokio::test]
async fn a_transaction_commits_inside_its_budget() {
    if !available().await {
        return;
    }
    let pool = full_pool().await;
    let table = marker("commit");
    let observer = observer().await;
    observer
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (v int)"
        ))
        .await
        .unwrap();
    let inserted = pool
        .transaction(&budget(2_000), ms(5), async |tx: &Transaction<'_>| {
            tx.execute(&format!("INSERT INTO {table} VALUES (1), (2)"), &[])
                .await
        })
        .await
        .unwrap();
    assert_eq!(inserted, 2);
    let n: i64 = observer
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .unwrap()
        .get(0);
    observer
        .batch_execute(&format!("DROP TABLE {table}"))
        .await
        .unwrap();
    assert_eq!(n, 2, "committed");
}
