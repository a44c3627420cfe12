//! The bottom of the stack on real servers: budgeted PostgreSQL queries (C3, C4, C5, C7, C21,
//! C22) and the read-through Redis cache that serves stale.
//!
//! One test binary of the integration tests, grouped by area as tonic and axum group theirs
//! (`cargo test -p hopbudget --all-features --test stores`); shared helpers are in
//! `tests/support`.

#[cfg(feature = "postgres")]
#[path = "../support/postgres.rs"]
mod postgres_support;

mod postgres_answers;
mod postgres_budget;
mod postgres_faults;
mod postgres_late_cancel;
mod redis_stale;
