//! End-to-end throughput: requests per second through a real axum server over loopback,
//! bare and behind `ServerBudgetLayer`, measured side by side by one load generator.
//!
//! A hyper HTTP/1.1 client keeps `CONNECTIONS` keep-alive connections busy (one request in
//! flight on each), every request carrying `x-request-timeout-ms: 500`. The two servers take
//! turns, `ROUNDS` rounds of `ROUND` each, so drift on a shared machine falls on both alike;
//! the figure is the total count over the total time of each. Target: the layer loses at
//! most 3% of the bare server's throughput.
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
        let bare = serve(app()).await;
        let layered = serve(app().layer(ServerBudgetLayer::new(Profile::default()))).await;
        // Warm both up once.
        round(bare).await;
        round(layered).await;
        let (mut n_bare, mut n_layered) = (0, 0);
        let started = Instant::now();
        for _ in 0..ROUNDS {
            n_bare += round(bare).await;
            n_layered += round(layered).await;
        }
        let each = ROUND.as_secs_f64() * ROUNDS as f64;
        let (bare_rps, layered_rps) = (n_bare as f64 / each, n_layered as f64 / each);
        println!(
            "{CONNECTIONS} connections, {ROUNDS} alternating rounds of {ROUND:?} each ({:.0?} in all)",
            started.elapsed()
        );
        println!("bare axum server      {bare_rps:>10.0} req/s");
        println!("with ServerBudgetLayer {layered_rps:>9.0} req/s");
        println!(
            "throughput lost: {:.1}%",
            100.0 * (1.0 - layered_rps / bare_rps)
        );
    });
}
