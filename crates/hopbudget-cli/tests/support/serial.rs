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

/// One module of a grouped binary at a time: the tests of one module run together, as they
/// did when the module was a test binary of its own, and the next module's start when the last
/// of them ends. The `fleet` and `proxy` binaries take it at the start of every test
/// (`let _module = support::serial::module(module_path!());`): their modules each start
/// processes on ports picked free a moment before, and load the machine in ways the others'
/// timings were never measured under. A std lock, waited on before the test's first `.await`
/// (a test's runtime has nothing else to run yet); poisoning is ignored, so a failed test
/// frees its module.
pub fn module(name: &'static str) -> ModuleTurn {
    let mut turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    while turn.0.is_some_and(|running| running != name) {
        turn = TURN_ENDED.wait(turn).unwrap_or_else(|e| e.into_inner());
    }
    turn.0 = Some(name);
    turn.1 += 1;
    ModuleTurn(())
}

/// A test's place in its module's turn ([`module`]); the turn ends with the module's last.
pub struct ModuleTurn(());

impl Drop for ModuleTurn {
    fn drop(&mut self) {
        let mut turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        turn.1 -= 1;
        if turn.1 == 0 {
            turn.0 = None;
            TURN_ENDED.notify_all();
        }
    }
}

/// The module whose tests are running, and how many of them.
static TURN: std::sync::Mutex<(Option<&'static str>, usize)> = std::sync::Mutex::new((None, 0));
static TURN_ENDED: std::sync::Condvar = std::sync::Condvar::new();
