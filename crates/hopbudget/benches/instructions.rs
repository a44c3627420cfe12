//! Instruction counts per request, for `valgrind --tool=callgrind`.
//!
//! Wall-clock timings on a shared two-core VM move by a third or more from one run to the
//! next; the number of instructions a request takes does not. This binary runs one stack for
//! a given number of requests and nothing else, so that two runs under callgrind, with
//! different counts, give the instructions of one request as their difference (start-up
//! and the runtime's set-up cancel out). `scripts/instructions.sh` does that for every stack
//! below and prints the table in the README's *Performance* section.
//!
//! ```text
//! instructions STACK REQUESTS
//! ```
//!
//! In process (one instant service, a request built per iteration carrying
//! `x-request-timeout-ms: 500`, its answer read to its end): `bare`, `timeout`
//! (`tower::timeout::Timeout`) and `layer` (`ServerBudgetLayer`), each as is (a fresh request,
//! no extension map yet) or with `-routed` (one extension already there, as behind axum's
//! router, which inserts `OriginalUri` and `MatchedPath`).
//!
//! Around a whole axum app, in process (a router with one instant route; the request reaches
//! the layer with no extension map, and the router inserts its own after the budget):
//! `app-bare`, `app-timeout` and `app-layer`.
//!
//! End to end (an axum server and a hyper HTTP/1.1 client on one thread over loopback, one
//! request in flight): `e2e-bare`, `e2e-timeout` (`tower-http`'s `TimeoutLayer`), `e2e-trace`
//! (`tower-http`'s `TraceLayer`, no subscriber) and `e2e-layer`.
//!
//! Two variants of `e2e-layer`: `e2e-layer-line`, its profile with `log: {hops: true}` and no
//! subscriber installed (the line is on and nobody reads it), and `e2e-layer-recorded`, with
//! a Prometheus recorder installed as the process's global one (`e2e-bare-recorded` is its
//! floor: nothing in the bare app records a metric).
//!
//! `e2e-bare-wait` and `e2e-layer-wait`: the same round trip to a handler that yields once
//! before it answers, so the layer's deadline timer is made.
//!
//! The client side, end to end over the same loopback (a bare axum server, a hyper-util
//! legacy `Client` making one call after another): `client-bare` (the client alone),
//! `client-timeout` (`tower::timeout::Timeout` over the same client) and `client-layer`
//! (`ClientBudgetLayer` over it). Every call, in all three, is made inside the scope of a
//! fresh `RequestBudget`, as a handler's call would be, so the difference between two stacks
//! is what the layer adds and nothing else. Budget and timeout are 30 s there: under callgrind
//! on a loaded machine a round trip can take longer than 500 ms of wall time.
//!
//! `token`: no request, a 30 s budget made, its cancellation token handed out (as a handler
//! that spawns work with it does) and the budget cancelled, one after another, the runtime let
//! run once after each: what a token's deadline timer costs to join and to leave.
//!
//! Build with `cargo bench -p hopbudget --features http,axum --bench instructions --no-run`.

use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt;
use hopbudget::http::client::ClientBudgetLayer;
use hopbudget::http::server::ServerBudgetLayer;
use hopbudget::{Profile, RequestBudget};
use http::{Request, Response};
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tower::{Layer, Service, ServiceExt};

mod support;
use support::{Bare, Req, RoutedBy, quote_app};

/// `requests` requests through `svc`, each answered at once and its body read to its end.
fn in_process<S, B>(mut svc: S, requests: usize, routed: bool)
where
    S: Service<Req, Response = Response<B>>,
    S::Error: std::fmt::Debug,
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    for _ in 0..requests {
        let mut req = Request::get("/quote")
            .header("x-request-timeout-ms", "500")
            .body(Full::new(Bytes::new()))
            .unwrap();
        if routed {
            req.extensions_mut().insert(RoutedBy);
        }
        let _ = svc.ready().now_or_never();
        let res = svc.call(req).now_or_never().expect("an instant service");
        let res = res.unwrap();
        assert_eq!(res.status(), 200, "the stack did not answer its route");
        let body = res.into_body().collect().now_or_never();
        std::hint::black_box(body);
    }
}

/// `requests` HTTP/1.1 round trips, one after another, to `router` served on loopback.
async fn end_to_end(router: axum::Router, requests: usize) {
    end_to_end_at(router, "/items/7", requests).await;
}

/// The same, to `path`.
async fn end_to_end_at(router: axum::Router, path: &'static str, requests: usize) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    for _ in 0..requests {
        let req = Request::get(path)
            .header("host", "bench")
            .header("x-request-timeout-ms", "500")
            .body(Empty::<Bytes>::new())
            .unwrap();
        send.ready().await.unwrap();
        let res = send.send_request(req).await.unwrap();
        assert_eq!(res.status(), 200);
        res.into_body().collect().await.unwrap();
    }
}

/// `requests` calls, one after another, through `client` to `app()` served on loopback, each
/// made inside the scope of a fresh budget and its answer read to its end.
async fn client_calls<C, B>(mut client: C, requests: usize)
where
    C: Service<Request<Empty<Bytes>>, Response = Response<B>>,
    C::Error: std::fmt::Debug,
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app()).await.unwrap() });
    let uri: http::Uri = format!("http://{addr}/items/7").parse().unwrap();
    let policy = Profile::default().policy();
    for _ in 0..requests {
        let budget = RequestBudget::local(CLIENT_WAIT, policy);
        let req = Request::get(uri.clone())
            .body(Empty::<Bytes>::new())
            .unwrap();
        let res = budget
            .scope(async {
                client.ready().await.unwrap();
                client.call(req).await.unwrap()
            })
            .await;
        assert_eq!(res.status(), 200);
        res.into_body().collect().await.unwrap();
    }
}

/// `requests` budgets, each made, its token handed out and the budget cancelled.
async fn tokens(requests: usize) {
    let policy = Profile::default().policy();
    for _ in 0..requests {
        let budget = RequestBudget::local(CLIENT_WAIT, policy);
        let token = budget.token();
        budget.cancel();
        tokio::task::yield_now().await;
        assert!(token.is_cancelled());
    }
}

/// The client stacks' budget and timeout: far longer than any round trip under callgrind.
const CLIENT_WAIT: Duration = Duration::from_secs(30);

/// hyper-util's legacy client over plain HTTP/1.1, keeping its one connection alive.
fn hyper_client() -> Client<HttpConnector, Empty<Bytes>> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new()).build(connector)
}

fn app() -> axum::Router {
    axum::Router::new()
        .route("/items/{id}", axum::routing::get(|| async { "ok" }))
        // A handler that waits once before it answers: the layer's deadline timer is made.
        .route(
            "/wait",
            axum::routing::get(|| async {
                tokio::task::yield_now().await;
                "ok"
            }),
        )
}

const STACKS: &str = "bare, timeout, layer (each also with -routed), app-bare, app-timeout, \
                      app-layer, e2e-bare, e2e-timeout, e2e-trace, e2e-layer, e2e-layer-line, \
                      e2e-bare-wait, e2e-layer-wait, \
                      e2e-bare-recorded, e2e-layer-recorded, client-bare, client-timeout, \
                      client-layer, token";

/// The default profile with the hop's line on (`log: {hops: true}`).
fn line_profile() -> Profile {
    let mut spec = Profile::default().spec().clone();
    spec.log.hops = true;
    Profile::from_spec(spec).unwrap()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(stack), Some(requests)) = (args.next(), args.next()) else {
        eprintln!("usage: instructions STACK REQUESTS   (STACK: {STACKS})");
        std::process::exit(2);
    };
    let Ok(requests) = requests.parse::<usize>() else {
        eprintln!("REQUESTS must be a whole number, not {requests:?}");
        std::process::exit(2);
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _enter = rt.enter();
    let timeout = Duration::from_millis(500);
    let (base, routed) = match stack.strip_suffix("-routed") {
        Some(base) => (base, true),
        None => (stack.as_str(), false),
    };
    let base = match base.strip_suffix("-recorded") {
        Some(base) if base.starts_with("e2e-") => {
            metrics_exporter_prometheus::PrometheusBuilder::new()
                .install_recorder()
                .unwrap();
            base
        }
        _ => base,
    };
    match base {
        "bare" => in_process(Bare, requests, routed),
        "timeout" => in_process(
            tower::timeout::TimeoutLayer::new(timeout).layer(Bare),
            requests,
            routed,
        ),
        "layer" => in_process(
            ServerBudgetLayer::new(Profile::default()).layer(Bare),
            requests,
            routed,
        ),
        // The layer around a whole axum app, as `axum::serve` runs it: the request reaches the
        // layer fresh, and the router inserts its own extensions after the budget.
        "app-bare" if !routed => in_process(quote_app(), requests, false),
        "app-timeout" if !routed => in_process(
            tower::timeout::TimeoutLayer::new(timeout).layer(quote_app()),
            requests,
            false,
        ),
        "app-layer" if !routed => in_process(
            ServerBudgetLayer::new(Profile::default()).layer(quote_app()),
            requests,
            false,
        ),
        "e2e-bare" if !routed => rt.block_on(end_to_end(app(), requests)),
        "e2e-timeout" if !routed => {
            #[allow(deprecated)]
            let layer = tower_http::timeout::TimeoutLayer::new(timeout);
            rt.block_on(end_to_end(app().layer(layer), requests))
        }
        "e2e-trace" if !routed => rt.block_on(end_to_end(
            app().layer(tower_http::trace::TraceLayer::new_for_http()),
            requests,
        )),
        "e2e-layer" if !routed => rt.block_on(end_to_end(
            app().layer(ServerBudgetLayer::new(Profile::default())),
            requests,
        )),
        "client-bare" if !routed => rt.block_on(client_calls(hyper_client(), requests)),
        "client-timeout" if !routed => rt.block_on(client_calls(
            tower::timeout::TimeoutLayer::new(CLIENT_WAIT).layer(hyper_client()),
            requests,
        )),
        "client-layer" if !routed => rt.block_on(client_calls(
            ClientBudgetLayer::new(Profile::default()).layer(hyper_client()),
            requests,
        )),
        "token" if !routed => rt.block_on(tokens(requests)),
        "e2e-bare-wait" if !routed => rt.block_on(end_to_end_at(app(), "/wait", requests)),
        "e2e-layer-wait" if !routed => rt.block_on(end_to_end_at(
            app().layer(ServerBudgetLayer::new(Profile::default())),
            "/wait",
            requests,
        )),
        "e2e-layer-line" if !routed => rt.block_on(end_to_end(
            app().layer(ServerBudgetLayer::new(line_profile())),
            requests,
        )),
        _ => {
            eprintln!("no stack named {stack:?} (STACK: {STACKS})");
            std::process::exit(2);
        }
    }
}
