//! What a test does when the service it needs (PostgreSQL, Redis, NATS) is not there.
//!
//! With `HOPBUDGET_REQUIRE_SERVICES=1` (CI, `scripts/test-all`) it fails, saying what to start.
//! Without it the test is skipped: it says so and returns, and the other tests of its binary,
//! which may need other services or none, still run.
#![allow(dead_code, unreachable_pub)]

/// Fail with `message` under `HOPBUDGET_REQUIRE_SERVICES=1`; otherwise print
/// `skipped: {message}` for the calling test, which then returns without testing anything.
pub fn skip_or_fail(message: &str) {
    assert!(
        std::env::var("HOPBUDGET_REQUIRE_SERVICES").as_deref() != Ok("1"),
        "{message}"
    );
    // Straight to stderr: the test harness would keep `eprintln!` from a passing test to itself.
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "skipped (HOPBUDGET_REQUIRE_SERVICES=1 makes this a failure): {message}"
    );
}
