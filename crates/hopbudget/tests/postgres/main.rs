//! Budgeted PostgreSQL queries on the real server (C3, C4, C5, C7, C21, C22): the statement
//! timeout from the budget, refusal, real cancel requests, faults, and the answers a handler
//! gives for `pool.query(..).await?`.
//!
//! One test binary of the integration tests, grouped by area as tonic and axum group theirs
//! (`cargo test -p hopbudget --all-features --test postgres`); shared helpers are in
//! `tests/support`. Every test here needs the server: without it (and without
//! `HOPBUDGET_REQUIRE_SERVICES=1`) `budget.rs` ends the process with status 0, skipping the
//! binary, which is why the Redis and NATS tests, whose helpers do the same, are binaries of
//! their own.

#[cfg(feature = "postgres")]
#[path = "../support/postgres.rs"]
mod postgres_support;

mod answers;
mod budget;
mod faults;
mod late_cancel;
