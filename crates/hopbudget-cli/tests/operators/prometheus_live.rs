//! The rules of `deploy/prometheus/hopbudget-rules.yml` and the dashboard
//! `deploy/grafana/hopbudget.json` on real data (issue #50 item 5, S25): `hopbudget proxy` in
//! front of small services under load, a real Prometheus scraping the proxies' admin
//! `/metrics` every second and evaluating the rules. Every recording rule, every dashboard
//! panel's query and every dashboard variable's query must return series through Prometheus's
//! HTTP API; the dropped-deadline alert must fire for the chain with a forgetful hop and stay
//! silent for the clean one.
//!
//! The panels' queries are read from the JSON as Grafana would send them with `All` chosen for
//! `service` and `route` (`.*`) and `RANGE` for `$__rate_interval` and `$__range`
//! (`dashboard::queries`).
//!
//! Two chains, each service behind its own proxy:
//! - forgetful: client (3 s) -> `orders` -> its service calls out through the proxy's egress
//!   with no deadline and no trace context (the edge total, 1 s, decides) -> `stock` -> a
//!   service that works 5 s. Both hops end at about 1 s, a common default.
//! - clean: client (400 ms) -> `cart` -> its service forwards the `x-request-timeout-ms` it was
//!   told -> `pricing` -> the same slow service. Both hops end at about 400 ms.
//!
//! The rest of the load drives every other signal at `pricing` (refused, low budget, a caller
//! that leaves) and at `report`, whose profile has enforcement off (late work).
//!
//! The rules are loaded as shipped except `for:`, set to 0s so that an alert fires on its first
//! evaluation instead of minutes later. Needs `/usr/bin/prometheus` (Debian's `prometheus`
//! package; or set `PROMETHEUS`). Without it the test says so and passes, unless
//! `HOPBUDGET_REQUIRE_SERVICES=1`, where it fails. By hand:
//! `cargo test -p hopbudget-cli --test operators prometheus_live::`.

use crate::support::dashboard;
use crate::support::proxy;
use crate::support::proxy::serve;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::support::proxy::Proxy;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde_json::Value;

/// A bound on waiting for Prometheus to have scraped and evaluated what the load did; reaching
/// it fails the test.
const PROMETHEUS_PATIENCE: Duration = Duration::from_secs(90);

/// What the dashboard's interval variables become: a window that covers the latest waves of
/// load, with Prometheus scraping every second.
const RANGE: &str = "1m";

/// A service whose work takes `ms`, whatever it is told.
async fn slow(ms: u64) -> SocketAddr {
    serve(Router::new().fallback(move || async move {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        "done"
    }))
    .await
}

/// Where a front service's calls go; known once the proxies have started.
#[derive(Clone, Default)]
struct Next {
    /// The proxy of the service it calls.
    proxy: Arc<OnceLock<SocketAddr>>,
    /// Its own proxy's egress (the forgetful service calls out through it).
    egress: Arc<OnceLock<SocketAddr>>,
}

/// The forgetful service: calls `stock` through its proxy's egress, with neither the deadline
/// it was told nor trace context, as a service that drops its deadline does.
async fn forgetful(next: Next) -> SocketAddr {
    serve(
        Router::new()
            .fallback(|State(next): State<Next>| async move {
                let stock = *next.proxy.get().unwrap();
                let egress = *next.egress.get().unwrap();
                match proxy::get(egress, &format!("http://{stock}/stock"), &[]).await {
                    Ok(answer) => (StatusCode::from_u16(answer.status).unwrap(), answer.body),
                    Err(e) => (StatusCode::BAD_GATEWAY, e),
                }
            })
            .with_state(next),
    )
    .await
}

/// The clean service: calls `pricing` with the budget it was told.
async fn clean(next: Next) -> SocketAddr {
    serve(
        Router::new()
            .fallback(|State(next): State<Next>, headers: HeaderMap| async move {
                let pricing = *next.proxy.get().unwrap();
                let told = headers
                    .get("x-request-timeout-ms")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                match proxy::get(pricing, "/quote", &[("x-request-timeout-ms", &told)]).await {
                    Ok(answer) => (StatusCode::from_u16(answer.status).unwrap(), answer.body),
                    Err(e) => (StatusCode::BAD_GATEWAY, e),
                }
            })
            .with_state(next),
    )
    .await
}

/// A running Prometheus; killed when dropped.
struct Prometheus {
    _child: tokio::process::Child,
    addr: SocketAddr,
}

impl Prometheus {
    /// Start `program` scraping `targets` every second, with the shipped rules (`for: 0s`).
    async fn start(program: &str, dir: &Path, targets: &[SocketAddr]) -> Self {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).unwrap();
        let rules = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../deploy/prometheus/hopbudget-rules.yml"),
        )
        .unwrap();
        let rules: String = rules
            .lines()
            .map(|l| match l.trim_start().strip_prefix("for: ") {
                Some(_) => format!("{}for: 0s\n", &l[..l.len() - l.trim_start().len()]),
                None => format!("{l}\n"),
            })
            .collect();
        std::fs::write(dir.join("rules.yml"), rules).unwrap();
        let targets: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: hopbudget\n    static_configs:\n      - targets: [{}]\n",
            dir.join("rules.yml").display(),
            targets.join(", ")
        );
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let port = proxy::free_port();
        let child = tokio::process::Command::new(program)
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("{program} starts: {e}"));
        let prometheus = Prometheus {
            _child: child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let ready = tokio::time::Instant::now() + PROMETHEUS_PATIENCE;
        while !matches!(proxy::get(prometheus.addr, "/-/ready", &[]).await, Ok(a) if a.status == 200)
        {
            assert!(
                tokio::time::Instant::now() < ready,
                "Prometheus is not ready; its log: {}",
                std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        prometheus
    }

    /// `GET /api/v1/<what>`: its `data`.
    async fn api(&self, what: &str) -> Value {
        let answer = proxy::get(self.addr, &format!("/api/v1/{what}"), &[])
            .await
            .unwrap();
        let json: Value = serde_json::from_str(&answer.body)
            .unwrap_or_else(|e| panic!("{what}: {e}: {}", answer.body));
        assert_eq!(json["status"], "success", "{what}: {json}");
        json["data"].clone()
    }

    /// The instant vector `query` returns now.
    async fn query(&self, query: &str) -> Vec<Value> {
        let data = self
            .api(&format!("query?query={}", proxy::query_encode(query)))
            .await;
        data["result"].as_array().cloned().unwrap_or_default()
    }
}

/// The recording rules' names, from the rules Prometheus loaded; each rule's health.
async fn recording_rules(prometheus: &Prometheus) -> Vec<String> {
    let data = prometheus.api("rules").await;
    let mut names = Vec::new();
    for group in data["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            assert_ne!(rule["health"], "err", "{rule}");
            if rule["type"] == "recording" {
                names.push(rule["name"].as_str().unwrap().to_owned());
            }
        }
    }
    names
}

/// One wave of load on both chains and the other signals; returns when all its requests have.
async fn wave(orders: SocketAddr, cart: SocketAddr, pricing: SocketAddr, report: SocketAddr) {
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..8 {
        // The forgetful chain, with plenty of budget: the edge total decides.
        calls.spawn(async move {
            let _ = proxy::get(orders, "/order", &[("x-request-timeout-ms", "3000")]).await;
        });
        // The clean chain.
        calls.spawn(async move {
            let _ = proxy::get(cart, "/cart", &[("x-request-timeout-ms", "400")]).await;
        });
    }
    for _ in 0..2 {
        // Refused before work (below refuse_below_ms) and a low-budget arrival.
        calls.spawn(async move {
            let _ = proxy::get(pricing, "/quote", &[("x-request-timeout-ms", "5")]).await;
        });
        calls.spawn(async move {
            let _ = proxy::get(pricing, "/quote", &[("x-request-timeout-ms", "30")]).await;
        });
        // Late work: enforcement off, the work outlives its 50 ms.
        calls.spawn(async move {
            let _ = proxy::get(report, "/report", &[("x-request-timeout-ms", "50")]).await;
        });
    }
    // A caller that leaves after 100 ms of its 2 s.
    calls.spawn(async move {
        let _ = tokio::time::timeout(
            Duration::from_millis(100),
            proxy::get(pricing, "/quote", &[("x-request-timeout-ms", "2000")]),
        )
        .await;
    });
    while calls.join_next().await.is_some() {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_recording_rule_and_dashboard_query_has_series_and_the_dropped_deadline_alert_fires_only_for_the_forgetful_chain()
 {
    let Some(program) = proxy::program(
        "PROMETHEUS",
        "/usr/bin/prometheus",
        &["--version"],
        "install Debian's prometheus package (apt-get install prometheus)",
    ) else {
        return;
    };

    // The forgetful chain.
    let stock_service = slow(5000).await;
    let stock = Proxy::start(stock_service, Some("service: stock\n"), &[]).await;
    let to_stock = Next::default();
    let orders_service = forgetful(to_stock.clone()).await;
    let orders = Proxy::start(
        orders_service,
        Some("service: orders\n"),
        &["--egress", "127.0.0.1:0"],
    )
    .await;
    to_stock.proxy.set(stock.addr).unwrap();
    to_stock.egress.set(orders.egress.unwrap()).unwrap();

    // The clean chain.
    let pricing_service = slow(5000).await;
    let pricing = Proxy::start(pricing_service, Some("service: pricing\n"), &[]).await;
    let to_pricing = Next::default();
    let cart_service = clean(to_pricing.clone()).await;
    let cart = Proxy::start(cart_service, Some("service: cart\n"), &[]).await;
    to_pricing.proxy.set(pricing.addr).unwrap();

    // Enforcement off: work that outlives its deadline is let through, and counted late.
    let report_service = slow(150).await;
    let report = Proxy::start(
        report_service,
        Some("service: report\nenforce: false\n"),
        &[],
    )
    .await;

    // Nobody reads their lines here: a full pipe would stop a proxy (its `/metrics` too)
    // after a dozen waves.
    let mut proxies = [stock, orders, pricing, cart, report];
    for proxy in &mut proxies {
        proxy.discard_stderr();
    }
    let [stock, orders, pricing, cart, report] = proxies;

    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("prometheus-live");
    let prometheus = Prometheus::start(
        &program,
        &dir,
        &[
            stock.admin,
            orders.admin,
            pricing.admin,
            cart.admin,
            report.admin,
        ],
    )
    .await;
    let records = recording_rules(&prometheus).await;
    assert!(records.len() >= 10, "{records:?}");
    let panels = dashboard::queries(&dashboard::dashboard(), RANGE);

    let firing = "ALERTS{alertname=\"HopbudgetDroppedDeadline\",alertstate=\"firing\"}";
    let until = tokio::time::Instant::now() + PROMETHEUS_PATIENCE;
    let mut without: Vec<String>;
    let mut waves = 0;
    loop {
        wave(orders.addr, cart.addr, pricing.addr, report.addr).await;
        waves += 1;
        without = Vec::new();
        for name in &records {
            if prometheus.query(name).await.is_empty() {
                without.push(name.clone());
            }
        }
        for panel in &panels {
            if prometheus.query(&panel.promql).await.is_empty() {
                without.push(format!("dashboard {}: {}", panel.place, panel.promql));
            }
        }
        let stock_fired = !prometheus
            .query(
                "ALERTS{alertname=\"HopbudgetDroppedDeadline\",alertstate=\"firing\",service=\"stock\"}",
            )
            .await
            .is_empty();
        if without.is_empty() && stock_fired {
            break;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "after {PROMETHEUS_PATIENCE:?} of load: recording rules and dashboard queries \
             without series: {without:?}; \
             the dropped-deadline alert fired for stock: {stock_fired}; alerts: {:?}",
            prometheus.query("ALERTS").await
        );
    }

    // The same load a while longer, so that the clean chain has had every chance to fire.
    for _ in 0..3 {
        wave(orders.addr, cart.addr, pricing.addr, report.addr).await;
        waves += 1;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    eprintln!(
        "shares at a default: {:?}",
        prometheus
            .query("hopbudget:hop_duration_at_default:ratio_rate5m > 0")
            .await
            .iter()
            .map(|s| format!("{} {}", s["metric"], s["value"][1]))
            .collect::<Vec<_>>()
    );

    // The forgetful service's calls went out with no deadline, counted per callee: `stock`'s
    // proxy, on loopback, which the default profile trusts by its `loopback` pattern.
    let outbound = "hopbudget_deadline_missing_total\
                    {service=\"orders\",route=\"(outbound)\",callee=\"loopback\"}";
    assert!(
        !prometheus.query(outbound).await.is_empty(),
        "{:?}",
        prometheus.query("hopbudget_deadline_missing_total").await
    );

    // Which default it was: the edge total, 1 s.
    let alerts = prometheus.query(firing).await;
    eprintln!(
        "after {waves} waves, every one of {} recording rules and {} dashboard queries has \
         series; firing: {}",
        records.len(),
        panels.len(),
        alerts
            .iter()
            .map(|a| a["metric"].to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let at_stock: Vec<&Value> = alerts
        .iter()
        .filter(|a| a["metric"]["service"] == "stock")
        .collect();
    assert!(
        at_stock.iter().all(|a| a["metric"]["default_ms"] == "1000"),
        "{alerts:?}"
    );
    // Silent on the clean chain (and on the rest of the load), which had the same waves.
    let loud: Vec<&Value> = alerts
        .iter()
        .filter(|a| a["metric"]["service"] != "stock" && a["metric"]["service"] != "orders")
        .collect();
    assert!(
        loud.is_empty(),
        "the dropped-deadline alert fired for {loud:?}"
    );
    // Silent because the clean chain's hops end at its deadline, not for want of data: its
    // share at each default is there, and small.
    for service in ["cart", "pricing"] {
        let shares = prometheus
            .query(&format!(
                "hopbudget:hop_duration_at_default:ratio_rate5m{{service=\"{service}\"}}"
            ))
            .await;
        assert_eq!(shares.len(), 5, "{service}: {shares:?}");
        for share in &shares {
            let value: f64 = share["value"][1].as_str().unwrap().parse().unwrap();
            assert!(value <= 0.5, "{service}: {share}");
        }
    }
    drop(prometheus);
}
