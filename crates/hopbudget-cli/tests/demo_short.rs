//! A short run of `hopbudget demo` (scenario S7), in process, checking the three targets of
//! the default run with bounds wide enough for a busy two-core machine: in propagated mode
//! the client's p99.9 stays within 1.2x the budget, the work done after the client gave up is
//! at most a third of what the timeouts mode did, and reco-scorer's refusals are visible.
//! Also: the background e-mail of S11 outlives the response under its own deadline.

use std::time::Duration;

use hopbudget_cli::demo::{self, DemoOptions, Mode, Topology};

#[test]
fn short_demo_meets_the_three_targets() {
    let mut opts = DemoOptions::new(Topology::builtin().unwrap());
    opts.duration = Some(Duration::from_secs(4));
    opts.drain_limit = Duration::from_secs(3);
    let (results, _raw) = demo::run(&opts).unwrap();
    let t = results.mode(Mode::Timeouts).unwrap();
    let p = results.mode(Mode::Propagated).unwrap();
    let table = demo::report::table(&results);
    println!("{table}");

    // Both modes replayed the same seeded schedule, in full.
    assert_eq!(t.requests, p.requests, "{table}");
    assert!(p.requests > 100, "{table}");

    // 1. The tail is bounded by the budget (S1, S7).
    let budget = results.budget_ms as f64;
    assert!(
        p.client_latency_ms.p999 <= 1.2 * budget,
        "propagated p99.9 {} ms above 1.2x the {budget} ms budget\n{table}",
        p.client_latency_ms.p999
    );

    // 2. Work for users who left: the timeouts mode does plenty, propagation stops it.
    assert!(t.work_after_give_up_ms > 0.0, "{table}");
    assert!(
        p.work_after_give_up_ms <= t.work_after_give_up_ms / 3.0,
        "propagated wasted {} ms, timeouts {} ms\n{table}",
        p.work_after_give_up_ms,
        t.work_after_give_up_ms
    );

    // 3. reco-scorer refuses when its budget is short (C3), and only in propagated mode.
    let reco = |m: &demo::ModeResult| {
        m.hops
            .iter()
            .find(|h| h.service == "reco-scorer")
            .unwrap()
            .clone()
    };
    assert!(reco(p).refused > 0, "{table}");
    assert_eq!(reco(t).refused, 0, "{table}");

    // The order-confirmation e-mail (S11) runs under its own deadline, handed over the
    // queue: it is not cancelled when the response goes out.
    assert!(p.background.sent > 0, "{table}");
    assert!(p.background.sent_after_answer > 0, "{table}");
    assert_eq!(
        p.background.expired + p.background.dropped_expired,
        0,
        "{table}"
    );

    // The report renders from these results.
    let html = demo::report::html(&results).unwrap();
    assert!(html.contains("<svg"), "the report has inline charts");
    assert!(html.contains("reco-scorer"));
}
