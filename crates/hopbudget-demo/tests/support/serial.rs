//! One demo run at a time in a test binary. A test binary runs its tests on several threads
//! at once, and now holds tests that, as files of their own, never shared a process. A demo
//! run is the checkout graph (or the bench's callee, or a leaf) under load on this machine,
//! and what its test checks depends on that load: which requests expire, the tail hedging
//! answers, the retry wave, the late work the audit may find, a backlog in NATS. Two runs at
//! once on two cores would each measure the other. So every test that runs the demo holds
//! [`one_demo_at_a_time`] for its whole run; tests that only parse options or spawn the
//! command for an error do not.
//!
//! A std `Mutex`: the tests are synchronous (the one async test holds it on its own
//! runtime's thread, which nothing else needs meanwhile); a test that failed holding it
//! poisons it, and the next takes it anyway: the lock orders runs, it guards no data.

use std::sync::{Mutex, MutexGuard, PoisonError};

static DEMO: Mutex<()> = Mutex::new(());

/// Wait until no other demo runs in this process, and run alone until the guard is dropped.
pub fn one_demo_at_a_time() -> MutexGuard<'static, ()> {
    DEMO.lock().unwrap_or_else(PoisonError::into_inner)
}
