//! Budgeted PostgreSQL queries on the real server (C3, C4, C5, C7, C21, C22): the statement
//! timeout from the budget, refusal, real cancel requests, faults, and the answers a handler
//! gives for `pool.query(..).await?`. Every test here but one (refused before any byte) needs
//! the server (`postgres_support::available`).

mod answers;
mod budget;
mod faults;
mod late_cancel;
