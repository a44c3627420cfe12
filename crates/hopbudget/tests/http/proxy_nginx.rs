//! A real reverse proxy between two hops: nginx, in front of a service with
//! `ServerBudgetLayer` called through reqwest's `BudgetMiddleware`, and (feature `grpc`) with
//! `grpc_pass` in front of a tonic service with `GrpcServerLayer` called through
//! `GrpcClientLayer`. nginx ignores deadlines (it is the hop of S13 that could break the chain)
//! but passes headers and trailers both ways, so:
//!
//! - the caller's `x-request-timeout-ms` (or `grpc-timeout`) reaches the service through nginx,
//!   and the service's budget comes from it, not from the edge total;
//! - the service's expiry and refusal reach the caller with their markers, and become
//!   `BudgetError::Expired` and `BudgetError::Refused` with the service's requirement (C17);
//! - nginx's *own* 504, when its `proxy_read_timeout` (`grpc_read_timeout`) fires first,
//!   carries no marker and comes while the caller still has budget: the caller gets it as an
//!   upstream failure (over gRPC a code that is not a deadline code), with its budget
//!   untouched, not as its own expiry (S13: the proxy's timeout is visible as such).
//!
//! Needs nginx (`apt-get install nginx-light`; `HOPBUDGET_NGINX`, default `nginx` on the `PATH`
//! or `/usr/sbin/nginx`). The test runs its own nginx on a free loopback port, with its
//! configuration, logs and pid file in a temporary directory. Without nginx the test says so
//! and passes, unless `HOPBUDGET_REQUIRE_SERVICES=1` (CI), where it fails.
#![cfg(all(feature = "axum", feature = "reqwest"))]

use std::path::PathBuf;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use hopbudget::http::reqwest::budget_error;
use hopbudget::http::server::ServerBudgetLayer;
use hopbudget::{BudgetError, HopPolicy, RequestBudget};

fn nginx() -> Option<PathBuf> {
    let candidates = match std::env::var_os("HOPBUDGET_NGINX") {
        Some(path) => vec![PathBuf::from(path)],
        None => vec![PathBuf::from("nginx"), PathBuf::from("/usr/sbin/nginx")],
    };
    let found = candidates.into_iter().find(|nginx| {
        std::process::Command::new(nginx)
            .arg("-v")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if found.is_none() {
        let message = "nginx not found: apt-get install nginx-light (or set HOPBUDGET_NGINX)";
        assert!(
            std::env::var("HOPBUDGET_REQUIRE_SERVICES").as_deref() != Ok("1"),
            "{message}"
        );
        eprintln!("skipped: {message}");
    }
    found
}

/// A running nginx, stopped on drop.
struct Nginx {
    child: std::process::Child,
    /// HTTP/1.1 in front of the HTTP service: `/` with nginx's defaults, `/short/` giving up
    /// after 100 ms.
    url: String,
    /// h2c in front of the gRPC service, with nginx's defaults.
    grpc_url: String,
    /// The same, giving up after 100 ms.
    grpc_short_url: String,
    dir: PathBuf,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `N` distinct free loopback ports: all bound at once (so no two are the same), then
/// released together; nginx binds them a moment later.
fn free_ports<const N: usize>() -> [u16; N] {
    let listeners: [std::net::TcpListener; N] =
        std::array::from_fn(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap());
    listeners.map(|l| l.local_addr().unwrap().port())
}

/// Start `nginx` in the foreground, proxying to the HTTP service at `upstream` and the gRPC
/// service at `grpc_upstream` (each `127.0.0.1:PORT`; see [`Nginx`]).
async fn start_nginx(nginx: &PathBuf, upstream: &str, grpc_upstream: &str) -> Nginx {
    let [port, grpc_port, grpc_short_port] = free_ports();
    let dir = std::env::temp_dir().join(format!("hopbudget-nginx-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = dir.display();
    let conf = format!(
        "daemon off;\n\
         master_process off;\n\
         worker_processes 1;\n\
         pid {prefix}/nginx.pid;\n\
         error_log {prefix}/error.log warn;\n\
         events {{ worker_connections 64; }}\n\
         http {{\n\
           access_log off;\n\
           client_body_temp_path {prefix}/body;\n\
           proxy_temp_path {prefix}/proxy;\n\
           fastcgi_temp_path {prefix}/fastcgi;\n\
           uwsgi_temp_path {prefix}/uwsgi;\n\
           scgi_temp_path {prefix}/scgi;\n\
           upstream service {{ server {upstream}; }}\n\
           server {{\n\
             listen 127.0.0.1:{port};\n\
             location / {{ proxy_http_version 1.1; proxy_pass http://service; }}\n\
             location /short/ {{\n\
               proxy_http_version 1.1;\n\
               proxy_read_timeout 100ms;\n\
               proxy_pass http://service/;\n\
             }}\n\
           }}\n\
           server {{\n\
             listen 127.0.0.1:{grpc_port} http2;\n\
             location / {{ grpc_pass grpc://{grpc_upstream}; }}\n\
           }}\n\
           server {{\n\
             listen 127.0.0.1:{grpc_short_port} http2;\n\
             location / {{ grpc_read_timeout 100ms; grpc_pass grpc://{grpc_upstream}; }}\n\
           }}\n\
         }}\n"
    );
    let conf_path = dir.join("nginx.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let child = std::process::Command::new(nginx)
        .arg("-p")
        .arg(&dir)
        .arg("-c")
        .arg(&conf_path)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("nginx starts");
    let mut nginx = Nginx {
        child,
        url: format!("http://127.0.0.1:{port}"),
        grpc_url: format!("http://127.0.0.1:{grpc_port}"),
        grpc_short_url: format!("http://127.0.0.1:{grpc_short_port}"),
        dir,
    };
    for _ in 0..200 {
        let mut listening = true;
        for port in [port, grpc_port, grpc_short_port] {
            listening &= tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok();
        }
        if listening {
            return nginx;
        }
        if let Ok(Some(status)) = nginx.child.try_wait() {
            let log = std::fs::read_to_string(nginx.dir.join("error.log")).unwrap_or_default();
            panic!("nginx exited ({status}): {log}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("nginx did not listen on {port} within 2 s");
}

/// nginx's own timeout is not the caller's: its budget is neither ended nor spent.
fn assert_untouched_by_nginx(caller: &RequestBudget) {
    assert_eq!(
        caller.end_cause(),
        None,
        "nginx's timeout ended the caller's budget"
    );
    assert!(caller.remaining() > Duration::from_secs(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_budgets_and_outcomes_cross_nginx_and_its_own_timeout_is_not_the_callers_expiry() {
    let Some(nginx) = nginx() else { return };
    let profile = crate::http_support::profile(
        "service: tax\nedge_total_ms: 9000\nroutes: [{path: /tax, min_budget_ms: 200}]",
    );
    let service = crate::http_support::serve(
        Router::new()
            .route(
                "/budget",
                get(|| async {
                    let budget = RequestBudget::current().expect("inside the layer");
                    format!(
                        "{} {}",
                        budget.source().as_str(),
                        budget.remaining().as_millis()
                    )
                }),
            )
            .route("/tax", get(|| async { "taxed" }))
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    "late"
                }),
            )
            .layer(ServerBudgetLayer::new(profile.clone())),
    )
    .await;
    // No gRPC service here: nginx's gRPC servers point at a closed port, unused.
    let proxy = start_nginx(&nginx, service.trim_start_matches("http://"), "127.0.0.1:9").await;
    let client = crate::http_support::client(&profile);
    let budget = |ms| RequestBudget::local(Duration::from_millis(ms), HopPolicy::DEFAULT);

    // The caller's budget crosses nginx: the service reads it, less the caller's margin.
    let seen = budget(800)
        .scope(async {
            client
                .get(format!("{}/budget", proxy.url))
                .send()
                .await?
                .text()
                .await
                .map_err(reqwest_middleware::Error::from)
        })
        .await
        .unwrap();
    let (source, ms) = seen.split_once(' ').unwrap();
    let ms: u64 = ms.parse().unwrap();
    assert_eq!(
        source, "relative-ms",
        "the budget did not cross nginx: {seen}"
    );
    assert!(
        ms < 800 && ms > 500,
        "the service saw {ms} ms of an 800 ms budget"
    );

    // The service's refusal crosses nginx with what it needed (C3, C17).
    let refused = budget(150)
        .scope(client.get(format!("{}/tax", proxy.url)).send())
        .await
        .unwrap_err();
    match budget_error(&refused) {
        Some(BudgetError::Refused(r)) => {
            assert_eq!(r.required(), Duration::from_millis(200), "{r:?}")
        }
        other => panic!("the refusal did not cross nginx: {other:?} ({refused})"),
    }

    // The service's expiry crosses nginx as the caller's expiry (C4, C17).
    let started = std::time::Instant::now();
    let expired = budget(300)
        .scope(client.get(format!("{}/slow", proxy.url)).send())
        .await
        .unwrap_err();
    assert_eq!(
        budget_error(&expired),
        Some(&BudgetError::Expired),
        "{expired}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));

    // nginx's own timeout: a 504 with no marker while the caller has 2 s. An upstream failure,
    // returned as it is; the caller's budget is untouched (S13).
    let caller = budget(2_000);
    let own = caller
        .scope(client.get(format!("{}/short/slow", proxy.url)).send())
        .await
        .expect("nginx's 504 is returned as a response");
    assert_eq!(own.status(), 504);
    assert!(!own.headers().contains_key("x-deadline-outcome"));
    assert_untouched_by_nginx(&caller);
    drop(proxy);
}

#[cfg(feature = "grpc")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_budgets_and_outcomes_cross_nginx_and_its_own_timeout_is_not_a_deadline_code() {
    use crate::grpc_support::{budget, call, grpc_client, serve_profile};
    use hopbudget_testkit::HOP_CALL_PATH;

    let Some(nginx) = nginx() else { return };
    let service = serve_profile(
        "tax",
        hopbudget::Profile::from_yaml(
            &format!("routes:\n  - path: {HOP_CALL_PATH}\n    min_budget_ms: 200\n"),
            "tax.yaml",
        )
        .unwrap(),
    )
    .await;
    let proxy = start_nginx(&nginx, "127.0.0.1:9", &service.addr.to_string()).await;
    let profile = hopbudget::Profile::default();

    // The caller's budget crosses nginx as `grpc-timeout`.
    let reply = budget(800)
        .scope(grpc_client(&profile, &proxy.grpc_url).call(call(&[], 0)))
        .await
        .expect("answered through nginx")
        .into_inner();
    assert_eq!(reply.source, ["grpc-timeout"], "{reply:?}");
    let seen = Duration::from_micros(reply.remaining_us[0]);
    assert!(
        seen < Duration::from_millis(800) && seen > Duration::from_millis(500),
        "the service saw {seen:?} of an 800 ms budget"
    );

    // The service's refusal crosses nginx, trailers and all (C3, C17).
    let refused = budget(150)
        .scope(grpc_client(&profile, &proxy.grpc_url).call(call(&[], 0)))
        .await
        .unwrap_err();
    match BudgetError::from_grpc(&refused) {
        Some(BudgetError::Refused(r)) => {
            assert_eq!(r.required(), Duration::from_millis(200), "{r:?}")
        }
        other => panic!("the refusal did not cross nginx: {other:?} ({refused:?})"),
    }

    // The service's expiry crosses nginx; its work stops (C4, C7).
    let expired = budget(300)
        .scope(grpc_client(&profile, &proxy.grpc_url).call(call(&[], 5_000)))
        .await
        .unwrap_err();
    assert_eq!(
        BudgetError::from_grpc(&expired),
        Some(BudgetError::Expired),
        "{expired:?}"
    );
    assert!(
        service
            .stats
            .wait_for(Duration::from_secs(2), |s| s.live() == 0)
            .await,
        "the service's work still runs after the deadline"
    );

    // nginx's own timeout under a 2 s budget: not a deadline code, and the budget stays open.
    let caller = budget(2_000);
    let own = caller
        .scope(grpc_client(&profile, &proxy.grpc_short_url).call(call(&[], 5_000)))
        .await
        .unwrap_err();
    assert!(
        !matches!(
            own.code(),
            tonic::Code::DeadlineExceeded | tonic::Code::Cancelled | tonic::Code::Ok
        ),
        "nginx's own timeout came back as a deadline outcome: {own:?}"
    );
    assert_eq!(BudgetError::from_grpc(&own), None, "{own:?}");
    assert_untouched_by_nginx(&caller);
    drop(proxy);
}
