//! `hopbudget-demo soak` for a few seconds, in process. A test binary of its own: a soak
//! checks the process's live task count returns to its baseline, which another test's tasks
//! in the same process would move.

mod short_soak;
