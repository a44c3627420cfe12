//! End-to-end throughput: requests per second through a real axum server over loopback,
//! bare and behind `ServerBudgetLayer`, measured side by side by one load generator.
//!
//! A hyper HTTP/1.1 client keeps `CONNECTIONS` keep-alive connections busy (one request in
//! flight on each), every request carrying `x-request-timeout-ms: 500`. The servers take
//! turns, `ROUNDS` rounds of `ROUND` each (`HOPBUDGET_E2E_ROUNDS` sets another number). In a
//! round every layered server runs between two runs of the bare server, and its count is
//! compared with the mean of those two; the median of those ratios is the figure, which a
//! shared machine's drift moves far less than totals. Target: the layer loses at most 3% of
//! the bare server's throughput.
//!
//! Two more servers give the figure its scale: `tower-http`'s `TimeoutLayer` shows what a
//! plain per-hop timeout costs on the same path, and its `TraceLayer` (no subscriber
//! installed) what a layer costs that, like the server layer, wraps the body to see the
//! answer's end.
//!
//! Run with `cargo bench -p hopbudget --bench http_e2e --features http,axum,metrics`.
//!
//! With `HOPBUDGET_E2E_SERVE=1` it only serves the four servers, prints their addresses (one
//! `name address` line each, bare first) and waits, for a load generator in another process:
//! `scripts/e2e_load.sh` drives them with `wrk` or `oha` the same way, server next to bare
//! server.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use hopbudget::Profile;
use hopbudget::http::server::ServerBudgetLayer;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;

const CONNECTIONS: usize = 32;
const ROUND: Duration = Duration::from_millis(500);
const ROUNDS: usize = 30;

/// `ROUNDS`, or the number in `HOPBUDGET_E2E_ROUNDS`.
fn rounds() -> usize {
    match std::env::var("HOPBUDGET_E2E_ROUNDS") {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("HOPBUDGET_E2E_ROUNDS={text:?} is not a number of rounds")),
        Err(_) => ROUNDS,
    }
}

async fn serve(router: Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
}

fn app() -> Router {
    Router::new().route("/items/{id}", get(|| async { "ok" }))
}

/// Requests answered by `addr` in one round of `ROUND`.
async fn round(addr: std::net::SocketAddr) -> u64 {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..CONNECTIONS {
        let (done, stop) = (done.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            stream.set_nodelay(true).unwrap();
            let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .unwrap();
            tokio::spawn(conn);
            while !stop.load(Ordering::Relaxed) {
                let req = http::Request::get("/items/7")
                    .header("host", "bench")
                    .header("x-request-timeout-ms", "500")
                    .body(Empty::<Bytes>::new())
                    .unwrap();
                let res = send.send_request(req).await.unwrap();
                assert_eq!(res.status(), 200);
                res.into_body().collect().await.unwrap();
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    tokio::time::sleep(ROUND).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    done.load(Ordering::Relaxed)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let servers = servers().await;
        if std::env::var_os("HOPBUDGET_E2E_SERVE").is_some() {
            for (name, addr) in &servers {
                println!("{} {addr}", name.replace(' ', "-"));
            }
            std::future::pending::<()>().await;
        }
        compare(&servers).await;
    });
}

/// The bare server first, then the layered ones, each on a port of its own.
async fn servers() -> [(&'static str, std::net::SocketAddr); 4] {
    // `tower-http`'s `TimeoutLayer` is what a service has without hopbudget: one fixed
    // timeout per hop. It changes no body type, so axum does not box its responses.
    #[allow(deprecated)]
    let timeout = tower_http::timeout::TimeoutLayer::new(Duration::from_millis(500));
    [
        ("bare axum server", serve(app()).await),
        ("tower-http TimeoutLayer", serve(app().layer(timeout)).await),
        (
            "ServerBudgetLayer",
            serve(app().layer(ServerBudgetLayer::new(Profile::default()))).await,
        ),
        // `tower-http`'s `TraceLayer`, with no subscriber installed, is the nearest thing
        // in the ecosystem to the server layer's shape: it wraps the future and the body
        // to see the answer's end, so axum boxes the body again, as it does for ours.
        (
            "tower-http TraceLayer",
            serve(app().layer(tower_http::trace::TraceLayer::new_for_http())).await,
        ),
    ]
}

/// Every layered server's throughput against the bare server's, printed.
async fn compare(servers: &[(&'static str, std::net::SocketAddr)]) {
    // Warm every server up once.
    for (_, addr) in servers {
        round(*addr).await;
    }
    // Per round, every layered server runs between two runs of the bare server, and its
    // count is taken against the mean of those two: the runs compared sit next to each
    // other in time, so the ratio cancels most of a shared machine's drift, and the median
    // of the ratios its outliers. The layered servers take turns at going first.
    let mut counts = vec![0u64; servers.len()];
    let mut bare_rounds = 0u64;
    let mut ratios = vec![Vec::new(); servers.len()];
    let started = Instant::now();
    let rounds = rounds();
    let layered = servers.len() - 1;
    for r in 0..rounds {
        let mut before = round(servers[0].1).await;
        counts[0] += before;
        bare_rounds += 1;
        for k in 0..layered {
            let i = 1 + (r + k) % layered;
            let n = round(servers[i].1).await;
            let after = round(servers[0].1).await;
            counts[0] += after;
            bare_rounds += 1;
            counts[i] += n;
            ratios[i].push(n as f64 / ((before + after) as f64 / 2.0).max(1.0));
            before = after;
        }
        ratios[0].push(1.0);
    }
    println!(
        "{CONNECTIONS} connections, {rounds} rounds of {ROUND:?} per layered server, each between two of the bare server ({:.0?} in all)",
        started.elapsed()
    );
    println!("server                    req/s  against bare: median of rounds [quartiles]");
    for (i, ((name, _), (count, mut r))) in servers
        .iter()
        .zip(counts.into_iter().zip(ratios))
        .enumerate()
    {
        let runs = if i == 0 { bare_rounds } else { rounds as u64 };
        let each = ROUND.as_secs_f64() * runs as f64;
        r.sort_by(f64::total_cmp);
        let q = |f: f64| 100.0 * (r[((r.len() - 1) as f64 * f).round() as usize] - 1.0);
        println!(
            "{name:<24} {:>8.0}  {:+.1}% [{:+.1}%, {:+.1}%]",
            count as f64 / each,
            q(0.5),
            q(0.25),
            q(0.75)
        );
    }
}
