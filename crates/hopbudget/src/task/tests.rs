//! Unit tests of the spawn helpers and `WithBudget`: the child budget, cancellation with the
//! request, detached work under its own budget.

// The tests spawn inside a scope and hand the JoinHandle out on purpose.
#![allow(clippy::async_yields_async)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

fn budget(ms: u64) -> RequestBudget {
    RequestBudget::local(Duration::from_millis(ms), HopPolicy::DEFAULT)
}

#[tokio::test(start_paused = true)]
async fn spawned_task_sees_a_child_budget_and_stops_on_cancel() {
    let request = budget(1_000);
    let steps = Arc::new(AtomicUsize::new(0));
    let handle = request
        .scope({
            let steps = steps.clone();
            async move {
                spawn(async move {
                    let mine = RequestBudget::current().expect("ambient budget in task");
                    assert_eq!(mine.remaining(), Duration::from_millis(1_000));
                    loop {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        steps.fetch_add(1, Ordering::SeqCst);
                    }
                })
            }
        })
        .await;
    tokio::time::sleep(Duration::from_millis(55)).await;
    request.cancel();
    assert_eq!(handle.await, Err(BudgetError::Cancelled));
    let at_cancel = steps.load(Ordering::SeqCst);
    assert_eq!(at_cancel, 5);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        steps.load(Ordering::SeqCst),
        at_cancel,
        "no orphan kept working"
    );
}

#[tokio::test(start_paused = true)]
async fn spawn_outside_a_request_is_unbounded() {
    assert_eq!(spawn(async { 7 }).await, Ok(7));
}

#[tokio::test(start_paused = true)]
async fn spawn_blocking_carries_the_budget_and_skips_ended_work() {
    let request = budget(100);
    let seen = request
        .scope(async { spawn_blocking(|| RequestBudget::current().map(|b| b.remaining())) })
        .await
        .await;
    assert_eq!(seen, Ok(Some(Duration::from_millis(100))));

    request.cancel();
    let ran = Arc::new(AtomicUsize::new(0));
    let r = request
        .scope({
            let ran = ran.clone();
            async move { spawn_blocking(move || ran.fetch_add(1, Ordering::SeqCst)) }
        })
        .await
        .await;
    assert_eq!(r, Err(BudgetError::Cancelled));
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "an ended budget runs no blocking job"
    );
}

#[tokio::test(start_paused = true)]
async fn s11_detached_work_finishes_after_the_request_under_its_own_deadline() {
    let request = budget(100);
    let (email, parent_id) = request
        .scope(async {
            let h = spawn_detached(Duration::from_secs(30), async {
                let own = RequestBudget::current().unwrap();
                tokio::time::sleep(Duration::from_secs(2)).await;
                (own.linked_from(), own.remaining())
            });
            (h, RequestBudget::current().unwrap().id())
        })
        .await;
    request.cancel();
    let (linked, left) = email.await.unwrap();
    assert_eq!(linked, Some(parent_id));
    assert_eq!(left, Duration::from_secs(28));

    // And its own deadline still bounds it.
    let stuck = spawn_detached(Duration::from_secs(1), std::future::pending::<()>());
    assert_eq!(stuck.await, Err(BudgetError::Expired));
}

#[tokio::test(start_paused = true)]
async fn with_current_budget_carries_into_another_task() {
    let request = budget(300);
    let fut = request
        .scope(async { async { RequestBudget::current().map(|b| b.id()) }.with_current_budget() })
        .await;
    // Polled on a plain tokio task, outside the request's scope.
    let seen = tokio::spawn(fut).await.unwrap();
    assert_eq!(seen, Some(request.id()));
    let plain = tokio::spawn(async { RequestBudget::current().is_some() }.with_current_budget());
    assert!(!plain.await.unwrap());
}

#[test]
fn detached_work_gets_a_root_span_that_follows_from_the_request() {
    use std::sync::Mutex;
    use tracing::span::{Attributes, Id};
    use tracing_subscriber::layer::{Context as LayerContext, Layer, SubscriberExt};

    #[derive(Clone, Default)]
    struct Capture {
        // (span name, is a root span)
        spans: Arc<Mutex<Vec<(&'static str, bool)>>>,
        links: Arc<AtomicUsize>,
    }
    impl<S: tracing::Subscriber> Layer<S> for Capture {
        fn on_new_span(&self, attrs: &Attributes<'_>, _: &Id, _: LayerContext<'_, S>) {
            let name = attrs.metadata().name();
            let root = attrs.is_root();
            self.spans.lock().unwrap().push((name, root));
        }
        fn on_follows_from(&self, _: &Id, _: &Id, _: LayerContext<'_, S>) {
            self.links.fetch_add(1, Ordering::SeqCst);
        }
    }
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    tracing::subscriber::with_default(subscriber, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let request = budget(100);
            let span = tracing::info_span!("hop");
            let handle = request
                .scope(async { spawn_detached(Duration::from_secs(5), async {}) })
                .instrument(span)
                .await;
            handle.await.unwrap();
        });
    });
    let spans = capture.spans.lock().unwrap().clone();
    assert!(
        spans.contains(&("detached", true)),
        "the detached span is a root, not the request's child: {spans:?}"
    );
    assert_eq!(
        capture.links.load(Ordering::SeqCst),
        1,
        "linked to the request"
    );
}
