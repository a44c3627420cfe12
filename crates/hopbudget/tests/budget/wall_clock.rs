//! Rule C1 and scenario S5: a wall-clock step during a request moves no deadline. The wall
//! clock is read once, to convert an absolute header, and never again.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use hopbudget::RequestBudget;
use hopbudget::clock::{SystemClock, WallClock};
use hopbudget::codec::{Carrier, InboundCarriers, epoch, read_inbound};
use http::HeaderMap;

/// A wall clock the test steps, counting how often it is read.
#[derive(Debug, Default)]
struct SteppedClock {
    offset_ms: AtomicI64,
    reads: AtomicUsize,
}

impl WallClock for SteppedClock {
    fn now_unix_ms(&self) -> u64 {
        self.reads.fetch_add(1, Ordering::SeqCst);
        let real = SystemClock.now_unix_ms() as i64;
        (real + self.offset_ms.load(Ordering::SeqCst)) as u64
    }
}

/// S5 end to end: the server layer converts an epoch header with the injected wall clock,
/// once. The handler then has NTP step that clock back 200 ms, and forward 500 ms; the
/// budget it runs under moves only with monotonic time, and the clock is never read again.
#[cfg(feature = "http")]
#[tokio::test(start_paused = true)]
async fn s5_wall_clock_steps_mid_request_move_no_deadline() {
    use std::convert::Infallible;

    use hopbudget::Profile;
    use hopbudget::http::server::ServerBudgetLayer;
    use tower::{ServiceBuilder, ServiceExt};

    let clock = Arc::new(SteppedClock::default());
    let profile = Profile::from_yaml("service: s5\ninbound: [epoch-ms]", "s5.yaml").unwrap();
    let handler_clock = clock.clone();
    let service = ServiceBuilder::new()
        .layer(ServerBudgetLayer::new(profile).with_wall_clock(clock.clone()))
        .service_fn(move |_req: http::Request<String>| {
            let clock = handler_clock.clone();
            async move {
                let budget = RequestBudget::current().expect("the layer installed a budget");
                let mut seen = vec![budget.remaining()];
                tokio::time::sleep(Duration::from_millis(100)).await;
                clock.offset_ms.fetch_sub(200, Ordering::SeqCst); // NTP steps back
                seen.push(budget.remaining());
                tokio::time::sleep(Duration::from_millis(50)).await;
                clock.offset_ms.fetch_add(500, Ordering::SeqCst); // and forward
                seen.push(budget.remaining());
                Ok::<_, Infallible>(http::Response::new(format!("{seen:?}")))
            }
        });
    let deadline = epoch::encode(Duration::from_millis(400), clock.now_unix_ms());
    clock.reads.store(0, Ordering::SeqCst);
    let req = http::Request::get("/")
        .header("x-request-deadline", deadline.to_header_value())
        .body(String::new())
        .unwrap();
    let res = service.oneshot(req).await.unwrap();
    assert_eq!(res.status(), 200);
    let body = http_body_util::BodyExt::collect(res.into_body())
        .await
        .unwrap()
        .to_bytes();
    let seen: Vec<u64> = std::str::from_utf8(&body)
        .unwrap()
        .trim_matches(|c| c == '[' || c == ']')
        .split(", ")
        .map(|d| d.trim_end_matches("ms").parse::<f64>().unwrap() as u64)
        .collect();
    // Converted once on arrival (up to a millisecond of epoch rounding), then monotonic only.
    assert!((399..=400).contains(&seen[0]), "{seen:?}");
    assert_eq!(
        seen[1],
        seen[0] - 100,
        "a step back moved nothing: {seen:?}"
    );
    assert_eq!(
        seen[2],
        seen[0] - 150,
        "a step forward moved nothing: {seen:?}"
    );
    assert_eq!(
        clock.reads.load(Ordering::SeqCst),
        1,
        "the wall clock is read once (C1)"
    );
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
