//! HTTP layer benchmarks.
//!
//! In process, no sockets: the same request, carrying `x-request-timeout-ms: 500`, through
//! four tower stacks around one instant service: bare, `tower::timeout::Timeout`, the
//! hopbudget server layer, and the server layer plus the client layer. The target is the
//! server layer at most 1.5x the `Timeout` stack. Then the S2 refusal: in process, and over
//! loopback (an axum server behind the layer, a hyper client; target under 1 ms).
//!
//! Run with `cargo bench -p hopbudget --bench http_layers --features http` (the `metrics`
//! feature adds the cost of the metrics facade to every hop).

use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt;
use hopbudget::Profile;
use hopbudget::http::client::ClientBudgetLayer;
use hopbudget::http::server::ServerBudgetLayer;
use http::Request;
use http_body_util::Full;
use tower::{Layer, Service, ServiceExt};

mod support;
use support::{Bare, Req};

fn main() {
    divan::main();
}

fn request(timeout_ms: &'static str, path: &'static str) -> Req {
    Request::get(path)
        .header("x-request-timeout-ms", timeout_ms)
        .body(Full::new(Bytes::new()))
        .unwrap()
}

/// Runs `svc` once per iteration on a fresh request; the service answers at once, so the
/// future is polled exactly once.
fn run<S>(bencher: divan::Bencher, mut svc: S, path: &'static str, timeout_ms: &'static str)
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
        .with_inputs(|| request(timeout_ms, path))
        .bench_local_values(|req| {
            let _ = svc.ready().now_or_never();
            svc.call(req).now_or_never().map(|r| r.unwrap())
        });
}

/// Runs `svc` once per iteration on a request `make` builds inside the measured loop, as a
/// real server builds one per request.
fn run_making<S>(bencher: divan::Bencher, mut svc: S, make: impl Fn() -> Req)
where
    S: Service<Req>,
    S::Error: std::fmt::Debug,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _enter = rt.enter();
    bencher.bench_local(|| {
        let _ = svc.ready().now_or_never();
        svc.call(make()).now_or_never().map(|r| r.unwrap())
    });
}

mod stack {
    use super::*;

    /// The server layer on a route with a static `min_budget_ms`, then on the same route
    /// learning its threshold (`learn: {}`): the learned threshold's cost per request.
    #[divan::bench(args = ["static", "learned"])]
    fn hopbudget_server_route(b: divan::Bencher, rule: &str) {
        let yaml = match rule {
            "static" => "routes: [{path: /quote, min_budget_ms: 20}]",
            _ => "routes: [{path: /quote, min_budget_ms: 20, learn: {}}]",
        };
        let profile = Profile::from_yaml(yaml, "bench.yaml").unwrap();
        run(
            b,
            ServerBudgetLayer::new(profile).layer(Bare),
            "/quote",
            "500",
        );
    }

    #[divan::bench]
    fn bare(b: divan::Bencher) {
        run(b, Bare, "/quote", "500");
    }

    #[divan::bench]
    fn tower_timeout(b: divan::Bencher) {
        run(
            b,
            tower::timeout::TimeoutLayer::new(Duration::from_millis(500)).layer(Bare),
            "/quote",
            "500",
        );
    }

    #[divan::bench]
    fn hopbudget_server(b: divan::Bencher) {
        run(
            b,
            ServerBudgetLayer::new(Profile::default()).layer(Bare),
            "/quote",
            "500",
        );
    }

    #[divan::bench]
    fn hopbudget_server_and_client(b: divan::Bencher) {
        let client = ClientBudgetLayer::new(Profile::default()).layer(Bare);
        run(
            b,
            ServerBudgetLayer::new(Profile::default()).layer(client),
            "/quote",
            "500",
        );
    }
}

/// The same stacks with the request built inside the measured loop, as a real server
/// builds one per request (the reference figures were taken this way).
mod stack_with_request_build {
    use super::*;

    fn run_building<S>(bencher: divan::Bencher, svc: S)
    where
        S: Service<Req>,
        S::Error: std::fmt::Debug,
    {
        run_making(bencher, svc, || request("500", "/quote"));
    }

    #[divan::bench]
    fn bare(b: divan::Bencher) {
        run_building(b, Bare);
    }

    #[divan::bench]
    fn tower_timeout(b: divan::Bencher) {
        run_building(
            b,
            tower::timeout::TimeoutLayer::new(Duration::from_millis(500)).layer(Bare),
        );
    }

    #[divan::bench]
    fn hopbudget_server(b: divan::Bencher) {
        run_building(b, ServerBudgetLayer::new(Profile::default()).layer(Bare));
    }

    #[divan::bench]
    fn hopbudget_server_and_client(b: divan::Bencher) {
        let client = ClientBudgetLayer::new(Profile::default()).layer(Bare);
        run_building(b, ServerBudgetLayer::new(Profile::default()).layer(client));
    }
}

/// The same stacks with the request built inside the loop and carrying one extension already,
/// as every request does by the time a layer added with axum's `Router::layer` sees it (the
/// router has inserted `MatchedPath` and `OriginalUri`). The budget's insert then costs one box,
/// not a new extension map.
mod stack_routed_request {
    use super::*;

    use super::support::RoutedBy;

    fn run_routed<S>(bencher: divan::Bencher, svc: S)
    where
        S: Service<Req>,
        S::Error: std::fmt::Debug,
    {
        run_making(bencher, svc, || {
            let mut req = request("500", "/quote");
            req.extensions_mut().insert(RoutedBy);
            req
        });
    }

    #[divan::bench]
    fn bare(b: divan::Bencher) {
        run_routed(b, Bare);
    }

    #[divan::bench]
    fn tower_timeout(b: divan::Bencher) {
        run_routed(
            b,
            tower::timeout::TimeoutLayer::new(Duration::from_millis(500)).layer(Bare),
        );
    }

    #[divan::bench]
    fn hopbudget_server(b: divan::Bencher) {
        run_routed(b, ServerBudgetLayer::new(Profile::default()).layer(Bare));
    }
}

mod refusal {
    use super::*;

    fn tax_profile() -> Profile {
        Profile::from_yaml(
            "service: tax\nroutes: [{path: /tax, min_budget_ms: 200}]",
            "bench",
        )
        .unwrap()
    }

    /// S2 in process: 120 ms left, the route needs 200 ms.
    #[divan::bench]
    fn in_process(b: divan::Bencher) {
        run(
            b,
            ServerBudgetLayer::new(tax_profile()).layer(Bare),
            "/tax",
            "120",
        );
    }

    /// S2 over loopback: a full HTTP/1 round trip to an axum server that refuses.
    #[divan::bench(sample_count = 200, sample_size = 10)]
    fn loopback_round_trip(b: divan::Bencher) {
        use hyper_util::client::legacy::Client;
        use hyper_util::rt::TokioExecutor;

        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let url = rt.block_on(async {
            let router = axum::Router::new()
                .route("/tax", axum::routing::get(|| async { "never reached" }))
                .layer(ServerBudgetLayer::new(tax_profile()));
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
            format!("http://{addr}/tax")
        });
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let send = || {
            let req = Request::get(&url)
                .header("x-request-timeout-ms", "120")
                .body(Full::new(Bytes::new()))
                .unwrap();
            let client = client.clone();
            async move {
                let res = client.request(req).await.unwrap();
                assert_eq!(res.status(), 503);
                http_body_util::BodyExt::collect(res.into_body())
                    .await
                    .unwrap();
            }
        };
        rt.block_on(send()); // warm the connection pool
        b.bench_local(|| rt.block_on(send()));
    }
}

/// What one request through the server layer pays for, piece by piece.
mod parts {
    use super::*;
    use hopbudget::RequestBudget;
    use hopbudget::clock::SystemClock;
    use hopbudget::codec::read_inbound;
    use hopbudget::observe::{Hop, HopLabels, Protocol};
    use std::sync::Arc;

    #[divan::bench]
    fn read_inbound_default(b: divan::Bencher) {
        let p = Profile::default();
        let req = request("500", "/quote");
        b.bench_local(|| read_inbound(req.headers(), p.inbound(), p.max(), &SystemClock));
    }

    #[divan::bench]
    fn hop_labels(b: divan::Bencher) {
        let service: Arc<str> = Arc::from("svc");
        b.bench_local(|| HopLabels::new(service.clone(), "/quote", Protocol::Http));
    }

    #[divan::bench]
    fn hop_start_finish(b: divan::Bencher) {
        let labels = HopLabels::new("svc", "/quote", Protocol::Http);
        let budget = RequestBudget::local(Duration::from_secs(1), Default::default());
        b.bench_local(|| Hop::start(&labels, &budget).finish(hopbudget::Outcome::Completed));
    }

    #[divan::bench]
    fn extensions_insert(b: divan::Bencher) {
        let budget = RequestBudget::local(Duration::from_secs(1), Default::default());
        b.with_inputs(|| request("500", "/quote"))
            .bench_local_values(|mut req| {
                req.extensions_mut().insert(budget.clone());
                req
            });
    }

    #[divan::bench]
    fn scope_poll(b: divan::Bencher) {
        let budget = RequestBudget::local(Duration::from_secs(1), Default::default());
        b.bench_local(|| budget.scope(std::future::ready(1)).now_or_never());
    }

    #[divan::bench]
    fn instrument_poll(b: divan::Bencher) {
        use tracing::Instrument;
        b.bench_local(|| {
            std::future::ready(1)
                .instrument(tracing::Span::none())
                .now_or_never()
        });
    }
}
