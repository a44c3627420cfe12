//! One demo run at a time in a test binary. A test binary runs its tests on several threads
//! at once, and now holds tests that, as files of their own, never shared a process. A demo
//! run is the checkout graph (or the bench's callee, or a leaf) under load on this machine,
//! and what its test checks depends on that load: which requests expire, the tail hedging
//! answers, the retry wave, the late work the audit may find, a backlog in NATS. Two runs at
//! once on two cores would each measure the other. So every test that runs the demo holds
//! the lock for its whole run ([`one_demo_at_a_time`], or [`one_demo_at_a_time_async`] in an
//! async test); tests that only parse options or spawn the command for an error do not.
//!
//! tokio's `Mutex`: the async tests hold it across `.await`, and a test that failed holding
//! it does not poison it for the others.

use tokio::sync::{Mutex, MutexGuard};

static DEMO: Mutex<()> = Mutex::const_new(());

/// Wait until no other demo runs in this process, and run alone until the guard is dropped.
/// For a synchronous test (outside any runtime: the demo starts its own).
pub fn one_demo_at_a_time() -> MutexGuard<'static, ()> {
    DEMO.blocking_lock()
}

/// [`one_demo_at_a_time`] for an async test.
pub async fn one_demo_at_a_time_async() -> MutexGuard<'static, ()> {
    DEMO.lock().await
}
