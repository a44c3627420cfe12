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

/// The proxy tests that open connections by the hundred or flood one, and time what the
/// proxy does about it: rounds of 500 slow clients whose RSS is compared (each round must
/// open its 500 before the 1 s header timeout cuts the first), the descriptor limit, the ping
/// flood, the slow and idle callers. As files of their own they shared a process with each
/// other only; one at a time, none of them is the load another measures.
pub static FLOOD: Mutex<()> = Mutex::const_new(());
