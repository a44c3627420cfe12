//! Locks for the tests that must not overlap. A test binary runs its tests on several threads
//! at once, and now holds tests that, as files of their own, never shared a process: a test
//! that measures time, or loads the machine enough to blur another's measurement, takes the
//! lock it shares with those tests for its whole run (`let _serial = CHECK.lock().await;`).
//! tokio's `Mutex`, not std's: it is held across `.await`, and a failed test does not poison
//! it for the others.

use tokio::sync::Mutex;

/// `hopbudget check` runs, HTTP, gRPC and against the interop services: each measures how
/// long the service held a request and what it answered, which a machine busy with another
/// check's services would blur.
pub static CHECK: Mutex<()> = Mutex::const_new(());
