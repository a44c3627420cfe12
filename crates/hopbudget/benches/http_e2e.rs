//! End-to-end throughput: requests per second through a real axum server over loopback,
//! bare and behind `ServerBudgetLayer`, measured side by side by one load generator.
//!
//! A hyper HTTP/1.1 client keeps `CONNECTIONS` keep-alive connections busy (one request in
//! flight on each), every request carrying `x-request-timeout-ms: 500`. The servers take
//! turns, `ROUNDS` rounds of `ROUND` each, so drift on a shared machine falls on all alike;
//! the figure is the total count over the total time of each. Target: the layer loses at
//! most 3% of the bare server's throughput.
//!
//! A third server with `tower-http`'s `TimeoutLayer` shows what a plain per-hop timeout costs
//! on the same path.
//!
//! Run with `cargo bench -p hopbudget --bench http_e2e --features http,axum,metrics`.

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
const ROUND: Duration = Duration::from_secs(2);
const ROUNDS: usize = 5;

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
        // `tower-http`'s `TimeoutLayer` is what a service has without hopbudget: one fixed
        // timeout per hop. It changes no body type, so axum does not box its responses.
        #[allow(deprecated)]
        let timeout = tower_http::timeout::TimeoutLayer::new(Duration::from_millis(500));
        let servers = [
            ("bare axum server", serve(app()).await),
            ("tower-http TimeoutLayer", serve(app().layer(timeout)).await),
            (
                "ServerBudgetLayer",
                serve(app().layer(ServerBudgetLayer::new(Profile::default()))).await,
            ),
        ];
        // Warm every server up once.
        for (_, addr) in &servers {
            round(*addr).await;
        }
        let mut counts = [0u64; 3];
        let started = Instant::now();
        for _ in 0..ROUNDS {
            for (count, (_, addr)) in counts.iter_mut().zip(&servers) {
                *count += round(*addr).await;
            }
        }
        let each = ROUND.as_secs_f64() * ROUNDS as f64;
        println!(
            "{CONNECTIONS} connections, {ROUNDS} alternating rounds of {ROUND:?} each ({:.0?} in all)",
            started.elapsed()
        );
        let bare = counts[0] as f64 / each;
        for ((name, _), count) in servers.iter().zip(counts) {
            let rps = count as f64 / each;
            println!(
                "{name:<24} {rps:>8.0} req/s  ({:+.1}% against bare)",
                100.0 * (rps / bare - 1.0)
            );
        }
    });
}
