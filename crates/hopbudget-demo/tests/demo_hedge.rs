//! `hopbudget-demo demo --hedge` (S21, C23): the same seeded calls to the heavy-tailed callee
//! on loopback without and with `HedgeLayer`. What is checked is what hedging does, not how
//! fast (speed is in docs/performance.md): the unhedged run sends one attempt a call; the
//! hedged ones send extra attempts for the slow calls, and the callee sees every losing
//! attempt end cancelled, never as a failure.

use std::time::Duration;

use hopbudget_demo::demo::tail::{self, Hedging, TailOptions, callee};

#[test]
fn hedging_sends_extra_attempts_for_the_tail_and_the_losers_arrive_cancelled() {
    let opts = TailOptions {
        rate_per_s: 250.0,
        duration: Duration::from_secs(2),
        ..TailOptions::default()
    };
    let runs = tail::run(&opts).unwrap();
    assert_eq!(runs.len(), 5);
    let plain = &runs[0];
    assert_eq!(plain.hedging, Hedging::None);
    // The seeded schedule's slow first attempts (50-100 ms), the same in every run.
    let slow = (0..plain.calls)
        .filter(|&c| callee::latency(c, 0) >= Duration::from_millis(50))
        .count();
    assert!(slow >= 1, "the schedule has a tail");
    assert_eq!(
        plain.attempts, plain.calls,
        "one attempt a call without hedging"
    );
    assert_eq!((plain.hedges, plain.cancelled), (0, 0));
    for r in &runs[1..] {
        assert_eq!(r.calls, plain.calls, "the same schedule: {r:?}");
        assert!(r.hedges >= 1, "a hedge for the tail: {r:?}");
        // A hedge cancelled before it reached the callee is never seen there.
        assert!(
            r.attempts > r.calls && r.attempts <= r.calls + r.hedges,
            "{r:?}"
        );
        // Each hedged call's loser is reset on the wire: the callee's server layer reads that
        // as its caller going away (C5), and the hop is cancelled, not failed or expired.
        assert!(r.cancelled >= 1, "{r:?}");
        assert!(r.cancelled <= r.hedges, "{r:?}");
    }
}
