//! Rule C1 and scenario S5: a wall-clock step during a request moves no deadline. The wall
//! clock is read once, to convert an absolute header, and never again.

use std::time::Duration;

use hopbudget::clock::{SkewedClock, SystemClock, WallClock};
use hopbudget::codec::{Carrier, InboundCarriers, epoch, read_inbound};
use hopbudget::{HopPolicy, RequestBudget, Source};
use http::HeaderMap;

#[tokio::test(start_paused = true)]
async fn s5_wall_clock_step_back_moves_no_deadline() {
    let clock = SkewedClock::new(0);
    let mut headers = HeaderMap::new();
    headers.insert(
        "x-request-deadline",
        epoch::encode(Duration::from_millis(400), SystemClock.now_unix_ms()).to_header_value(),
    );
    let inbound = read_inbound(
        &headers,
        &InboundCarriers::new([Carrier::EpochMs]),
        Duration::from_secs(30),
        &clock,
    )
    .unwrap()
    .unwrap();
    let budget = RequestBudget::from_carrier(inbound.carrier, inbound.budget, HopPolicy::DEFAULT);
    assert_eq!(budget.source(), Source::Carrier(Carrier::EpochMs));
    let before = budget.remaining();

    // Mid-request, NTP steps the wall clock back 200 ms, then forward 500 ms.
    tokio::time::advance(Duration::from_millis(100)).await;
    clock.step(-200);
    assert_eq!(budget.remaining(), before - Duration::from_millis(100));
    clock.step(500);
    tokio::time::advance(Duration::from_millis(50)).await;
    assert_eq!(
        budget.remaining(),
        before - Duration::from_millis(150),
        "only monotonic time is spent"
    );
    assert!(!budget.is_done());
}

#[tokio::test(start_paused = true)]
async fn relative_budgets_never_read_the_wall_clock() {
    #[derive(Debug)]
    struct Untouchable;
    impl WallClock for Untouchable {
        fn now_unix_ms(&self) -> u64 {
            panic!("the wall clock must not be read for a relative header");
        }
    }
    let mut headers = HeaderMap::new();
    headers.insert("grpc-timeout", "250m".parse().unwrap());
    headers.insert("x-request-timeout-ms", "300".parse().unwrap());
    let got = read_inbound(
        &headers,
        &InboundCarriers::new([Carrier::GrpcTimeout, Carrier::RelativeMs, Carrier::EpochMs]),
        Duration::from_secs(30),
        &Untouchable,
    )
    .unwrap()
    .unwrap();
    assert_eq!(got.budget, Duration::from_millis(250));
}
