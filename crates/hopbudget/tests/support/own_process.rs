//! A test that needs its process to itself runs in a process of its own: the test re-runs
//! this test binary with only itself selected (`--exact`), and passes when that run passed.
//!
//! For what a shared binary would spoil: a measure of the whole process (its resident memory),
//! or a process-wide install (the global `tracing` subscriber) that would catch every other
//! test's spans. The child process runs the same test function, which finds itself named in
//! [`VAR`] and does the work.
#![allow(dead_code, unreachable_pub)]

use std::process::Command;

/// The variable that tells the child process which test it runs.
pub const VAR: &str = "HOPBUDGET_OWN_PROCESS";

/// Whether this is the process of its own for the test `name` (its path in the binary,
/// `module::test`): then the caller does the work. Otherwise this runs `name` in a child
/// process, fails when it failed or did not run, and returns `false`.
pub fn run_alone(name: &str) -> bool {
    if std::env::var(VAR).as_deref() == Ok(name) {
        return true;
    }
    let out = Command::new(std::env::current_exe().expect("this test binary"))
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(VAR, name)
        .output()
        .expect("the test binary runs again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // What the child printed, kept by the harness with this test's output.
    eprint!("{stderr}");
    assert!(
        out.status.success(),
        "{name}, in a process of its own, failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("1 passed"),
        "{name} did not run in its own process:\n{stdout}"
    );
    false
}
