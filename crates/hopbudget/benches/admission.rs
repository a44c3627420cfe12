//! Admission benchmarks: the uncontended cost of `AdmissionLayer` beside tower's
//! `ConcurrencyLimit`, around one instant service (target: at most 1.5x), and the
//! `BudgetSemaphore` beside tokio's `Semaphore`.
//!
//! Run with `cargo bench -p hopbudget --features http --bench admission` (the layer admits
//! HTTP requests).

use std::convert::Infallible;
use std::future::Ready;
use std::time::Duration;

use futures_util::FutureExt;
use hopbudget::admission::{AdmissionConfig, AdmissionLayer, BudgetSemaphore};
use hopbudget::{HopPolicy, RequestBudget};
use http::{Request, Response};
use tower::{Layer, Service, ServiceExt};

fn main() {
    divan::main();
}

type Req = Request<String>;

/// A request as it reaches the admission layer behind the server layer: its budget is in the
/// extensions.
fn request(budgeted: bool) -> Req {
    let mut req = Request::get("/quote").body(String::new()).unwrap();
    if budgeted {
        req.extensions_mut().insert(RequestBudget::local(
            Duration::from_millis(500),
            HopPolicy::DEFAULT,
        ));
    }
    req
}

#[derive(Clone, Copy)]
struct Bare;

impl Service<Req> for Bare {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Req) -> Self::Future {
        std::future::ready(Ok(Response::new(String::new())))
    }
}

/// One request per iteration through `svc`, readied and called; the service answers at
/// once, so each future is polled exactly once. The request is built outside the loop.
fn run<S>(bencher: divan::Bencher, mut svc: S, budgeted: bool)
where
    S: Service<Req>,
    S::Error: std::fmt::Debug,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _enter = rt.enter();
    bencher
        .with_inputs(|| request(budgeted))
        .bench_local_values(|req| {
            let _ = svc.ready().now_or_never();
            svc.call(req).now_or_never().map(|r| r.unwrap())
        });
}

const LIMIT: usize = 64;

mod uncontended {
    use super::*;

    #[divan::bench]
    fn bare(b: divan::Bencher) {
        run(b, Bare, true);
    }

    #[divan::bench]
    fn tower_concurrency_limit(b: divan::Bencher) {
        run(
            b,
            tower::limit::ConcurrencyLimitLayer::new(LIMIT).layer(Bare),
            true,
        );
    }

    /// The request's budget is read from its extensions and checked against the cost.
    #[divan::bench]
    fn admission_with_budget(b: divan::Bencher) {
        let layer =
            AdmissionLayer::new(AdmissionConfig::new(LIMIT).with_cost(Duration::from_millis(20)));
        run(b, layer.layer(Bare), true);
    }

    /// No budget anywhere: admitted FIFO, no clock read.
    #[divan::bench]
    fn admission_without_budget(b: divan::Bencher) {
        let layer = AdmissionLayer::new(AdmissionConfig::new(LIMIT));
        run(b, layer.layer(Bare), false);
    }
}

/// What one clock read costs where the layers run: inside a runtime with a time driver. The
/// benches are built with tokio's `test-util` (a dev-dependency), whose clock takes a lock.
mod floor {
    #[divan::bench]
    fn tokio_instant_now_in_runtime(b: divan::Bencher) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let _enter = rt.enter();
        b.bench_local(tokio::time::Instant::now);
    }

    #[divan::bench]
    fn std_mutex_lock_unlock(b: divan::Bencher) {
        let m = std::sync::Mutex::new(0usize);
        b.bench_local(|| *m.lock().unwrap() += 1);
    }
}

mod semaphore {
    use super::*;

    #[divan::bench]
    fn tokio_semaphore(b: divan::Bencher) {
        let sem = tokio::sync::Semaphore::new(LIMIT);
        b.bench_local(|| sem.acquire().now_or_never().map(|p| p.map(drop)));
    }

    #[divan::bench]
    fn budget_semaphore(b: divan::Bencher) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let _enter = rt.enter();
        let sem = BudgetSemaphore::new(LIMIT);
        let budget = RequestBudget::local(Duration::from_secs(10), HopPolicy::DEFAULT);
        let cost = Duration::from_millis(20);
        b.bench_local(|| {
            sem.acquire_with(&budget, cost)
                .now_or_never()
                .map(|p| p.map(drop))
        });
    }
}
