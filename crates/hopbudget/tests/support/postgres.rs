//! The real PostgreSQL server for the database tests: `DATABASE_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test` (trust auth). A test that needs it starts with
//! [`available`]: without the server it is skipped, or fails under
//! `HOPBUDGET_REQUIRE_SERVICES=1` (`support/services.rs`); a server gone later fails the test.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use tokio_postgres::NoTls;

/// Where the server is.
pub fn url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// What to say of a server out of reach: why, and how to start it.
fn missing(e: impl std::fmt::Display) -> String {
    format!(
        "PostgreSQL is not reachable at {} ({e}). Start it with \
         `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`, \
         or point DATABASE_URL at one (trust auth, database `test`).",
        url()
    )
}

/// Fail, saying how to start the server.
pub fn unreachable(e: impl std::fmt::Display) -> ! {
    panic!("{}", missing(e))
}

/// Whether the server answers. When it does not, the calling test, which needs it, is skipped
/// (it says so and returns), or fails under `HOPBUDGET_REQUIRE_SERVICES=1` (CI).
pub async fn available() -> bool {
    match tokio_postgres::connect(&url(), NoTls).await {
        Ok((client, conn)) => {
            // Dropping the client lets the connection end cleanly.
            drop(client);
            let _ = conn.await;
            true
        }
        Err(e) => {
            crate::services_support::skip_or_fail(&missing(e));
            false
        }
    }
}

/// A unique tag for one test's SQL, so `pg_stat_activity` finds only its statements.
pub fn marker(name: &str) -> String {
    format!("hopbudget_{name}_{}", std::process::id())
}

/// Milliseconds.
pub fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// A separate connection that watches (and, for the fault tests, acts on) what the server runs.
pub async fn observer() -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&url(), NoTls)
        .await
        .unwrap_or_else(|e| unreachable(e));
    tokio::spawn(conn);
    client
}

/// The backends running a statement that carries `marker` now.
pub async fn running_pids(observer: &tokio_postgres::Client, marker: &str) -> Vec<i32> {
    observer
        .query(
            "SELECT pid FROM pg_stat_activity \
             WHERE state = 'active' AND pid <> pg_backend_pid() AND query LIKE '%' || $1 || '%'",
            &[&marker],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// Wait (up to 5 s) until exactly one backend runs a statement carrying `marker`; its pid.
pub async fn wait_one_running(observer: &tokio_postgres::Client, marker: &str) -> i32 {
    for _ in 0..100 {
        if let [pid] = running_pids(observer, marker).await[..] {
            return pid;
        }
        tokio::time::sleep(ms(50)).await;
    }
    panic!("no single backend runs `{marker}`")
}
