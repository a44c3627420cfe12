//! `hopbudget-demo demo --hedge` (S21, C23): the same seeded calls to the heavy-tailed callee
//! on loopback without and with `HedgeLayer`. What is checked is what hedging does, not how
//! fast (speed is in docs/performance.md): the unhedged run sends one attempt a call; the
//! hedged ones send extra attempts for the slow calls, and the callee sees every losing
//! attempt end cancelled, never as a failure; beside each hedged run is the best a single
//! hedge delay does at its rate of extra calls, from the pairs recorded in the same run. Both
//! tails: ten times the median, and the seeds' stale 180 ms model.

use std::time::Duration;

use crate::support::serial::one_demo_at_a_time;
use hopbudget_demo::demo::tail::replicas::Routing;
use hopbudget_demo::demo::tail::{self, Hedging, MAX_EXTRA, Tail, TailOptions};

#[test]
fn hedging_sends_extra_attempts_for_the_tail_and_the_losers_arrive_cancelled() {
    let _demo = one_demo_at_a_time();
    hedging_on(Tail::TenX);
}

#[test]
fn on_the_seeds_tail_too_hedging_sends_extra_attempts_and_the_losers_arrive_cancelled() {
    let _demo = one_demo_at_a_time();
    hedging_on(Tail::Seeds);
}

fn hedging_on(which: Tail) {
    let opts = TailOptions {
        rate_per_s: 250.0,
        duration: Duration::from_secs(2),
        tail: which,
        ..TailOptions::default()
    };
    let report = tail::run(&opts).unwrap();
    assert_eq!(report.tail, which);
    let runs = &report.runs;
    assert_eq!(runs.len(), 5);
    let plain = &runs[0];
    assert_eq!(plain.hedging, Hedging::None);
    // The seeded schedule's slow first attempts (50-100 ms, or 180 ms), the same in every run.
    let slow = (0..plain.calls)
        .filter(|&c| which.latency(c, 0) >= Duration::from_millis(50))
        .count();
    assert!(slow >= 1, "the schedule has a tail");
    assert_eq!(
        plain.attempts, plain.calls,
        "one attempt a call without hedging"
    );
    assert_eq!((plain.hedges, plain.cancelled, plain.best), (0, 0, None));
    // The pairs run: one pair a call of the same schedule on the same callee; with about 5
    // slow first attempts in 500 calls its p99.9 is the slowest, at least a slow draw.
    assert_eq!(report.pairs as u64, plain.calls);
    let slowest_draw = match which {
        Tail::TenX => 50.0,
        Tail::Seeds => 180.0,
    };
    assert!(report.pairs_first_p999_ms >= slowest_draw, "{report:?}");
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
        // Beside it, the best a single delay does at its rate of extra calls (capped at 5%).
        let best = r.best.expect("a best hedge beside every hedged run");
        assert!(best.extra <= r.extra().min(MAX_EXTRA), "{r:?}");
        assert!(best.p999_ms <= report.pairs_first_p999_ms, "{r:?}");
    }
    // With all of the 5% allowed the best is at least as good as at any run's rate.
    let widest = report.best_at_most.expect("a best with all of the 5%");
    assert!(widest.extra <= MAX_EXTRA);
    for r in &runs[1..] {
        assert!(
            widest.p999_ms <= r.best.map_or(f64::MAX, |b| b.p999_ms),
            "{report:?}"
        );
    }
    let text = tail::text(&report, &opts);
    assert!(
        text.contains(which.as_str()) && text.contains("vs best"),
        "{text}"
    );
}

#[test]
fn across_replicas_no_hedge_reaches_the_replica_its_first_attempt_went_to() {
    let _demo = one_demo_at_a_time();
    let opts = TailOptions {
        rate_per_s: 250.0,
        duration: Duration::from_secs(2),
        ..TailOptions::default()
    };
    let runs = tail::replicas::run(&opts).unwrap();
    let routings: Vec<Routing> = runs.iter().map(|r| r.routing).collect();
    assert_eq!(
        routings,
        [Routing::None, Routing::Elsewhere, Routing::Anywhere]
    );
    assert_eq!(runs[0].attempts, runs[0].calls, "{runs:?}");
    let elsewhere = &runs[1];
    assert!(
        elsewhere.attempts > elsewhere.calls,
        "hedges were sent: {elsewhere:?}"
    );
    // Counted by the replicas themselves, over the sockets.
    assert_eq!(elsewhere.same_replica, 0, "{elsewhere:?}");
    let text = tail::replicas::text(&runs, &opts);
    assert!(
        text.contains("elsewhere") && text.contains("anywhere"),
        "{text}"
    );
}
