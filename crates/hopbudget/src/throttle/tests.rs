//! `ThrottleLayer` over a callee at 3x overload, on tokio's paused clock: every call counted,
//! the user's own calls throttled too, and a call its caller dropped not counted. That a
//! throttled call is not retried is the retry policy's test (`retry.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Semaphore;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};

use super::{AdaptiveThrottle, ThrottleLayer, Throttled};
use crate::{error::BudgetError, error::Refused};

/// A callee with 2 slots of 10 ms (200 calls/s) that refuses at once when both are busy;
/// counts the calls that reached it and those it accepted.
fn callee(
    sent: Arc<AtomicU64>,
    accepted: Arc<AtomicU64>,
) -> impl Service<u64, Response = (), Error = BoxError, Future = impl Send> + Clone + Send {
    let slots = Arc::new(Semaphore::new(2));
    tower::service_fn(move |_: u64| {
        sent.fetch_add(1, Ordering::Relaxed);
        let permit = slots.clone().try_acquire_owned();
        let accepted = accepted.clone();
        async move {
            let Ok(_permit) = permit else {
                let r = Refused::new(Duration::from_millis(10), Duration::ZERO);
                return Err::<(), BoxError>(Box::new(BudgetError::Refused(r)));
            };
            accepted.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(10)).await;
            Ok(())
        }
    })
}

#[tokio::test(start_paused = true)]
async fn at_3x_the_calls_sent_stay_near_what_the_callee_accepts() {
    let (sent, accepted) = (Arc::default(), Arc::default());
    let throttle = Arc::new(AdaptiveThrottle::new());
    let client = ServiceBuilder::new()
        .layer(ThrottleLayer::new(throttle.clone()))
        .service(callee(Arc::clone(&sent), Arc::clone(&accepted)));
    // 600 calls/s for 5 s, one every 1.667 ms: three times what the callee can take.
    let mut tasks = Vec::new();
    let mut throttled = 0u64;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for n in 0..3_000u64 {
        let client = client.clone();
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            let result = client.oneshot(n).await;
            let _ = tx.send(matches!(&result, Err(e) if e.is::<Throttled>()));
        }));
        tokio::time::sleep(Duration::from_micros(1_667)).await;
    }
    drop(tx);
    while let Some(was_throttled) = rx.recv().await {
        throttled += u64::from(was_throttled);
    }
    let (sent, accepted) = (
        sent.load(Ordering::Relaxed),
        accepted.load(Ordering::Relaxed),
    );
    // Without the layer all 3,000 reach the callee (3x what it accepts); with it the user's
    // own calls are throttled too, and what is sent settles near K = 2 times the accepts.
    assert_eq!(sent + throttled, 3_000);
    assert!(
        (sent as f64) < 2.3 * accepted as f64,
        "sent {sent}, accepted {accepted}, throttled {throttled}"
    );
    assert!(accepted >= 900, "the callee stays full: {accepted}");
}

#[tokio::test(start_paused = true)]
async fn a_call_its_caller_dropped_says_nothing_about_the_callee() {
    let throttle = Arc::new(AdaptiveThrottle::new());
    let slow = tower::service_fn(|_: u64| async {
        tokio::time::sleep(Duration::from_secs(10)).await;
        Ok::<_, BoxError>(())
    });
    let client = ServiceBuilder::new()
        .layer(ThrottleLayer::new(throttle.clone()))
        .service(slow);
    let call = client.oneshot(1);
    let _ = tokio::time::timeout(Duration::from_millis(5), call).await;
    assert_eq!(
        throttle.counts(),
        (0, 0),
        "dropped before its answer: not counted"
    );
}
