//! The gate's decisions, on a hand-set wall clock and tokio's paused clock, so every boundary
//! is checked to the millisecond.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::clock::ManualClock;
use crate::{Profile, RequestBudget, Source};

const NOW: u64 = 1_800_000_000_000;

fn setup() -> (Profile, Arc<ManualClock>, Gate) {
    let profile = Profile::default().with_service("billing");
    let clock = Arc::new(ManualClock::new(NOW));
    let gate = Gate::new(&profile, "orders").with_wall_clock(clock.clone());
    (profile, clock, gate)
}

fn with_deadline(at: u64) -> HashMap<String, String> {
    HashMap::from([
        ("deadline-epoch-ms".to_owned(), at.to_string()),
        ("order-id".to_owned(), "42".to_owned()),
    ])
}

#[tokio::test(start_paused = true)]
async fn expired_exactly_at_deadline_plus_skew_and_not_a_millisecond_before() {
    let profile = Profile::from_yaml("service: billing\nrefuse_below_ms: 0\n", "p.yaml").unwrap();
    let clock = Arc::new(ManualClock::new(NOW));
    let gate = Gate::new(&profile, "orders").with_wall_clock(clock.clone());
    let msg = with_deadline(NOW);
    // The default skew allowance is 50 ms: at deadline + 49 ms the message is still live,
    // with 1 ms of budget.
    clock.set(NOW + 49);
    match gate.check(&msg) {
        Decision::Live(admitted) => {
            assert_eq!(admitted.budget().remaining(), Duration::from_millis(1))
        }
        other => panic!("{other:?}"),
    }
    clock.set(NOW + 50);
    match gate.check(&msg) {
        Decision::Expired(dead) => {
            assert_eq!(dead.reason(), Reason::Expired);
            assert!(dead.detail().contains("0 ms"), "{}", dead.detail());
        }
        other => panic!("{other:?}"),
    }
    clock.set(NOW + 3_600_000);
    assert!(matches!(gate.check(&msg), Decision::Expired(_)));
}

#[tokio::test(start_paused = true)]
async fn live_budget_is_the_remainder_clamped_by_the_maximum_processing_budget() {
    let (profile, _, gate) = setup();
    let Decision::Live(a) = gate.check(&with_deadline(NOW + 400)) else {
        panic!()
    };
    // 400 ms plus the 50 ms skew allowance given to the message.
    assert_eq!(a.budget().remaining(), Duration::from_millis(450));
    assert_eq!(
        a.budget().source(),
        Source::Carrier(crate::codec::Carrier::Queue)
    );
    drop(a);
    let gate = gate.with_max_processing(Duration::from_millis(200));
    let Decision::Live(a) = gate.check(&with_deadline(NOW + 3_600_000)) else {
        panic!()
    };
    assert_eq!(a.budget().remaining(), Duration::from_millis(200));
    // Without a clamp the profile maximum applies (C9).
    let gate = Gate::new(&profile, "orders").with_wall_clock(Arc::new(ManualClock::new(NOW)));
    let Decision::Live(a) = gate.check(&with_deadline(NOW + 3_600_000)) else {
        panic!()
    };
    assert_eq!(a.budget().remaining(), profile.max());
}

#[tokio::test(start_paused = true)]
async fn missing_deadline_gets_the_edge_total() {
    let (profile, _, gate) = setup();
    let Decision::Live(a) = gate.check(&HashMap::<String, String>::new()) else {
        panic!()
    };
    assert_eq!(a.budget().source(), Source::Fallback);
    assert_eq!(a.budget().remaining(), profile.edge_total());
}

#[tokio::test(start_paused = true)]
async fn malformed_header_is_dead_lettered_naming_the_header() {
    let (_, _, gate) = setup();
    for bad in ["soon", "", "-5", "12345678901234567"] {
        let mut msg = with_deadline(0);
        msg.insert("deadline-epoch-ms".into(), bad.into());
        match gate.check(&msg) {
            Decision::Malformed(dead) => {
                assert_eq!(dead.reason(), Reason::Malformed);
                assert!(
                    dead.detail().contains("`deadline-epoch-ms`"),
                    "{}",
                    dead.detail()
                );
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    // Not UTF-8 at all: still malformed, never "no deadline".
    let mut headers = http::HeaderMap::new();
    headers.insert(
        "deadline-epoch-ms",
        http::HeaderValue::from_bytes(b"\xff1").unwrap(),
    );
    assert!(matches!(gate.check(&headers), Decision::Malformed(_)));
}

#[tokio::test(start_paused = true)]
async fn too_little_left_for_the_work_is_refused() {
    let (_, _, gate) = setup();
    let gate = gate.with_min_budget(Duration::from_millis(100));
    // 49 ms + 50 ms skew = 99 ms < 100 ms.
    match gate.check(&with_deadline(NOW + 49)) {
        Decision::Refused(dead) => {
            assert_eq!(dead.reason(), Reason::Refused);
            assert!(
                dead.detail().contains("needs 100 ms, 99 ms remain"),
                "{}",
                dead.detail()
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        gate.check(&with_deadline(NOW + 50)),
        Decision::Live(_)
    ));
}

#[tokio::test(start_paused = true)]
async fn work_runs_in_the_budget_scope_and_is_stopped_at_the_deadline() {
    let (_, _, gate) = setup();
    let Decision::Live(a) = gate.check(&with_deadline(NOW + 100)) else {
        panic!()
    };
    let id = a.budget().id();
    let seen = a
        .run(async { RequestBudget::current().map(|b| (b.id(), b.remaining())) })
        .await;
    match seen {
        Processed::Completed(Some((seen, left))) => {
            assert_eq!(seen, id);
            assert_eq!(left, Duration::from_millis(150));
        }
        other => panic!("{other:?}"),
    }

    let Decision::Live(a) = gate.check(&with_deadline(NOW + 100)) else {
        panic!()
    };
    let started = tokio::time::Instant::now();
    match a.run(tokio::time::sleep(Duration::from_secs(10))).await {
        Processed::Expired(dead) => assert_eq!(dead.reason(), Reason::Expired),
        other => panic!("{other:?}"),
    }
    assert_eq!(started.elapsed(), Duration::from_millis(150));
}

#[tokio::test(start_paused = true)]
async fn dropping_the_work_cancels_its_budget() {
    let (_, _, gate) = setup();
    let Decision::Live(a) = gate.check(&with_deadline(NOW + 10_000)) else {
        panic!()
    };
    let budget = a.budget().clone();
    let child = budget.child();
    let run = tokio::spawn(a.run(std::future::pending::<()>()));
    tokio::time::advance(Duration::from_millis(10)).await;
    run.abort();
    let _ = run.await;
    assert_eq!(child.end_cause(), Some(crate::EndCause::Cancelled));
}

#[test]
fn dead_letter_copy_keeps_every_original_header() {
    let (_, clock, gate) = setup();
    clock.advance(60_000);
    let original = with_deadline(NOW);
    let dead = gate.check(&original).into_result().unwrap_err();
    let mut copy = original.clone();
    dead.annotate(&mut copy);
    for (k, v) in &original {
        assert_eq!(copy.get(k), Some(v), "{k}");
    }
    assert_eq!(copy[REASON_HEADER], "expired");
    assert!(
        copy[DETAIL_HEADER].contains("59950 ms"),
        "{}",
        copy[DETAIL_HEADER]
    );
}

#[tokio::test(start_paused = true)]
async fn a_stamp_read_back_by_the_gate_gives_the_forward_budget_plus_skew() {
    let (profile, clock, gate) = setup();
    let stamper = Stamper::new(&profile).with_wall_clock(clock.clone());
    let request = RequestBudget::local(Duration::from_millis(300), profile.policy());
    let mut headers = HashMap::new();
    request
        .scope(async { stamper.stamp(&mut headers) })
        .await
        .unwrap();
    clock.advance(100);
    let Decision::Live(a) = gate.check(&headers) else {
        panic!()
    };
    // 300 - 6 ms reserve (C2) - 100 ms waited + 50 ms skew allowance.
    assert_eq!(a.budget().remaining(), Duration::from_millis(244));
}
