//! The gate's decisions, on a hand-set wall clock and tokio's paused clock, so every boundary
//! is checked to the millisecond.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::clock::ManualClock;
use crate::{budget::RequestBudget, budget::Source, profile::Profile};

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
async fn expired_exactly_at_deadline_plus_skew_and_refused_inside_the_allowance() {
    let profile = Profile::from_yaml("service: billing\nrefuse_below_ms: 0\n", "p.yaml").unwrap();
    let clock = Arc::new(ManualClock::new(NOW));
    let gate = Gate::new(&profile, "orders").with_wall_clock(clock.clone());
    let msg = with_deadline(NOW);
    // 1 ms before the deadline: live, with 1 ms, never more (#32: the allowance is not
    // budget).
    clock.set(NOW - 1);
    match gate.check(&msg) {
        Decision::Live(admitted) => {
            assert_eq!(admitted.budget().remaining(), Duration::from_millis(1))
        }
        other => panic!("{other:?}"),
    }
    // From the deadline to deadline + 49 ms (the default allowance is 50 ms): maybe not
    // expired by the producer's clock, so not counted as expired, but nothing is left to
    // work with.
    for late in [0, 49] {
        clock.set(NOW + late);
        match gate.check(&msg) {
            Decision::Refused(dead) => {
                assert_eq!(dead.reason(), Reason::Refused);
                assert!(
                    dead.detail().contains(&format!("{late} ms ago"))
                        && dead.detail().contains("50 ms skew allowance"),
                    "{}",
                    dead.detail()
                );
            }
            other => panic!("{late}: {other:?}"),
        }
    }
    clock.set(NOW + 50);
    match gate.check(&msg) {
        Decision::Expired(dead) => {
            assert_eq!(dead.reason(), Reason::Expired);
            assert!(dead.detail().contains("50 ms"), "{}", dead.detail());
        }
        other => panic!("{other:?}"),
    }
    clock.set(NOW + 3_600_000);
    assert!(matches!(gate.check(&msg), Decision::Expired(_)));
}

/// #32, item 11: a message stamped with 93 ms left runs with 93 ms, not 93 + the allowance:
/// everything its work calls is told the user's deadline, never a later one.
#[tokio::test(start_paused = true)]
async fn the_work_budget_never_passes_the_stamped_deadline() {
    let (_, _, gate) = setup();
    let Decision::Live(a) = gate.check(&with_deadline(NOW + 93)) else {
        panic!()
    };
    assert_eq!(a.budget().at_arrival(), Duration::from_millis(93));
    let told = a
        .run(async { RequestBudget::current().unwrap().forward() })
        .await;
    match told {
        // 93 less the 6 ms reserve (C2).
        Processed::Completed(forward) => assert_eq!(forward, Duration::from_millis(87)),
        other => panic!("{other:?}"),
    }
}

/// #32, item 7: every retry runs under the first budget; a message without a deadline is
/// not given a fresh edge total per attempt, and one that runs out ends expired, not refused.
#[tokio::test(start_paused = true)]
async fn retries_spend_the_first_budget_and_end_expired() {
    let (profile, _, gate) = setup();
    for headers in [HashMap::new(), with_deadline(NOW + 300)] {
        let first = gate.check(&headers).into_result().unwrap();
        let first_budget = first.budget().clone();
        let started_with = first_budget.at_arrival();
        assert!(matches!(
            first.run(async { Err::<(), _>("down") }).await,
            Processed::Completed(Err(_))
        ));
        tokio::time::advance(started_with - Duration::from_millis(100)).await;
        let again = gate
            .check_retry(&headers, &first_budget)
            .into_result()
            .unwrap();
        assert_eq!(again.budget().at_arrival(), Duration::from_millis(100));
        assert_eq!(again.budget().source(), first_budget.source());
        drop(again);
        // Less than the refuse threshold left: it ran out during its retries.
        tokio::time::advance(Duration::from_millis(100) - profile.policy().refuse_below / 2).await;
        match gate.check_retry(&headers, &first_budget) {
            Decision::Expired(dead) => {
                assert_eq!(dead.reason(), Reason::Expired);
                assert!(
                    dead.detail().contains("during retries"),
                    "{}",
                    dead.detail()
                );
            }
            other => panic!("{other:?}"),
        }
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(matches!(
            gate.check_retry(&headers, &first_budget),
            Decision::Expired(_)
        ));
    }
}

/// #32, item 7: a budget that ran out before the work was first polled (a message waiting
/// for a work slot) says so: expired before work, not while the work ran.
#[tokio::test(start_paused = true)]
async fn a_budget_spent_before_the_work_starts_is_expired_before_work() {
    let (_, _, gate) = setup();
    let Decision::Live(a) = gate.check(&with_deadline(NOW + 100)) else {
        panic!()
    };
    tokio::time::advance(Duration::from_millis(100)).await;
    let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let work = {
        let ran = ran.clone();
        async move { ran.store(true, std::sync::atomic::Ordering::SeqCst) }
    };
    match a.run(work).await {
        Processed::Expired(dead) => {
            assert!(
                dead.detail().contains("waited for a work slot"),
                "{}",
                dead.detail()
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
}

#[tokio::test(start_paused = true)]
async fn live_budget_is_the_remainder_clamped_by_the_maximum_processing_budget() {
    let (profile, _, gate) = setup();
    let Decision::Live(a) = gate.check(&with_deadline(NOW + 400)) else {
        panic!()
    };
    // 400 ms: the skew allowance is never added to the budget (#32).
    assert_eq!(a.budget().remaining(), Duration::from_millis(400));
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
    assert_eq!(a.budget().at_arrival(), profile.edge_total());
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
    // 99 ms < 100 ms.
    match gate.check(&with_deadline(NOW + 99)) {
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
        gate.check(&with_deadline(NOW + 100)),
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
            assert_eq!(left, Duration::from_millis(100));
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
    assert_eq!(started.elapsed(), Duration::from_millis(100));
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
    assert_eq!(child.end_cause(), Some(crate::error::EndCause::Cancelled));
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
        copy[DETAIL_HEADER].contains("60000 ms"),
        "{}",
        copy[DETAIL_HEADER]
    );
}

#[tokio::test(start_paused = true)]
async fn a_stamp_read_back_by_the_gate_gives_the_forward_budget_less_the_wait() {
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
    // 300 - 6 ms reserve (C2) - 100 ms waited; no skew allowance added (#32).
    assert_eq!(a.budget().remaining(), Duration::from_millis(194));
}
