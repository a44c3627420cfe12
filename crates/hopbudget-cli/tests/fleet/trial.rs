//! The fleet trial (S24, issue #45 item 5): the fleet a new user tried, built from the per-language
//! guides and run as it would run in production, each service behind its own `hopbudget proxy`:
//!
//! ```text
//! client --800 ms, no traceparent--> web (Node, OpenTelemetry SDK)
//!          --> orders (Python Flask, OpenTelemetry SDK) --> stock (Go net/http)
//!                                                     --> payments (grpc-go)
//! ```
//!
//! The sidecars and the two traced services export their spans over OTLP/HTTP to
//! `hopbudget audit --listen`. The client sends a deadline and no `traceparent`, as browsers
//! and most gateways' callers do: the trace the services carry is the one web's sidecar starts.
//! Each run holds:
//! - every service is told at most what its caller had left, minus the margin (C2), including
//!   behind a forgetful `orders` that forwards no deadline (S13, C25);
//! - slow `stock` work stops by the deadline (C4, C5);
//! - the audit of the fleet's spans exits 0 on the healthy and the forgetful run, and 1 on a
//!   run with a real break (an `orders` that carries no trace context, so its calls match no
//!   request and get the edge total), naming the hop (C26, S20).
//!
//! The services live in `interop/fleet/` and appear in no doc's example, so the docs are not
//! tuned to them. Needs Go and grpc-go (`apt-get install golang-go golang-google-grpc-dev`),
//! `node` with `@opentelemetry/sdk-node`, `@opentelemetry/instrumentation-http` and
//! `@opentelemetry/exporter-trace-otlp-proto` in `HOPBUDGET_OTEL_NODE_PATH` (default
//! `target/otel-node/node_modules`), and a Python with Flask, requests, grpcio and the
//! OpenTelemetry SDK and OTLP/HTTP exporter (`HOPBUDGET_PYTHON`); `scripts/test-all` installs
//! them. Without one, the tests say so and pass, unless `HOPBUDGET_REQUIRE_SERVICES=1`, where
//! they fail. By hand: `cargo test -p hopbudget-cli --test fleet trial::`.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::OnceLock;

use crate::support::proxy::go::{GoService, build, skip_unless_built};
use crate::support::proxy::service::Service;
use crate::support::proxy::{PATIENCE, Proxy, free_port, get, program, terminate};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};

/// What the client gives each request: below the default profile's 1000 ms edge total, so a
/// hop that lost the deadline is told more than its caller had, and the checks see it.
const BUDGET: u64 = 800;

/// What one call through two sidecars (the caller's egress, the callee's ingress) takes from
/// the budget at least, with the default profile: `hop_margin_ms` (5) plus
/// `transit_allowance_ms` (1), as in `fleet/checkout.rs`. The client's call passes one
/// sidecar, which takes the same.
const MARGIN: u64 = 6;

/// Requests per run that reach every service.
const REQUESTS: usize = 5;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// How `orders` treats its outbound calls (`ORDERS_MODE` in `interop/fleet/orders.py`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Orders {
    /// Forwards what is left of its budget and the trace context.
    Healthy,
    /// Forwards the trace context and no deadline: its sidecar must still shrink the budget.
    Forgetful,
    /// Forwards neither: its calls match no request, a real break the audit must name.
    Untraced,
}

impl Orders {
    fn env(self) -> &'static str {
        match self {
            Orders::Healthy => "healthy",
            Orders::Forgetful => "forgetful",
            Orders::Untraced => "untraced",
        }
    }
}

/// The Go services, built once per test binary.
fn go_services() -> Option<(PathBuf, PathBuf)> {
    static STOCK: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    static PAYMENTS: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let stock = skip_unless_built(STOCK.get_or_init(|| build("fleet/stock", "")))?;
    let payments = skip_unless_built(
        PAYMENTS.get_or_init(|| build("grpcgo_service", "golang-google-grpc-dev")),
    )?;
    Some((stock, payments))
}

fn python() -> Option<String> {
    program(
        "HOPBUDGET_PYTHON",
        "python3",
        &[
            "-c",
            "import flask, grpc, requests, opentelemetry.exporter.otlp.proto.http.trace_exporter",
        ],
        "pip install flask grpcio requests opentelemetry-sdk \
         opentelemetry-exporter-otlp-proto-http (scripts/test-all puts them in target/pyvenv), \
         and HOPBUDGET_PYTHON=target/pyvenv/bin/python",
    )
}

/// `node` and the `node_modules` holding the OpenTelemetry SDK for Node.
fn node() -> Option<(String, String)> {
    let modules = std::env::var("HOPBUDGET_OTEL_NODE_PATH").unwrap_or_else(|_| {
        repo()
            .join("target/otel-node/node_modules")
            .display()
            .to_string()
    });
    let check = format!(
        "module.paths.unshift({modules:?}); require('@opentelemetry/sdk-node'); \
         require('@opentelemetry/instrumentation-http'); \
         require('@opentelemetry/exporter-trace-otlp-proto')"
    );
    let node = program(
        "HOPBUDGET_NODE",
        "node",
        &["-e", &check],
        &format!(
            "npm install --prefix target/otel-node @opentelemetry/sdk-node \
             @opentelemetry/instrumentation-http @opentelemetry/exporter-trace-otlp-proto \
             (scripts/test-all does), or set HOPBUDGET_OTEL_NODE_PATH to a node_modules \
             holding them; looked in {modules}"
        ),
    )?;
    Some((node, modules))
}

/// `hopbudget audit --listen`: the fleet's collector.
struct Audit {
    child: Child,
    endpoint: String,
}

impl Audit {
    async fn start() -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_hopbudget"))
            .args(["audit", "--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the hopbudget binary runs");
        let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
        let first = tokio::time::timeout(PATIENCE, stderr.next_line())
            .await
            .expect("the audit says where it listens")
            .unwrap()
            .expect("the audit is running");
        let endpoint = first
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in {first:?}"))
            .to_owned();
        // Keep reading stderr, so the audit never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = stderr.next_line().await {} });
        Audit { child, endpoint }
    }

    /// SIGTERM: the audit reports on what it received and exits; its exit code and report.
    async fn verdict(mut self) -> (Option<i32>, String) {
        let mut stdout = self.child.stdout.take().unwrap();
        let status = terminate(&mut self.child).await;
        let mut report = String::new();
        stdout.read_to_string(&mut report).await.unwrap();
        (status.code(), report)
    }
}

/// The fleet, running.
struct Fleet {
    web: Service,
    orders: Service,
    stock: GoService,
    payments: GoService,
    /// web's, orders', stock's and payments' sidecars, callers first.
    sidecars: Vec<Proxy>,
    audit: Audit,
}

/// What each service was told by one request that went through.
#[derive(Debug)]
struct Told {
    web: u64,
    orders: u64,
    stock: u64,
    payments: u64,
}

/// `KEY=MS` in `line` (`web told=794`).
fn ms_after(line: &str, key: &str) -> u64 {
    let value = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key} in {line:?}"));
    value
        .parse()
        .unwrap_or_else(|_| panic!("{key} is no number of ms in {line:?}: the hop had no deadline"))
}

impl Fleet {
    /// Start it, callees first; `None` (after saying why) when a peer is missing.
    async fn start(orders_mode: Orders) -> Option<Fleet> {
        let (stock_bin, payments_bin) = go_services()?;
        let python = python()?;
        let (node, node_modules) = node()?;
        let audit = Audit::start().await;
        let sidecar = |service: &str| format!("service: {service}\n");
        let otlp = ["--otlp-endpoint", audit.endpoint.as_str()];

        let stock = GoService::start(&stock_bin).await;
        let stock_sidecar = Proxy::start(stock.addr, Some(&sidecar("stock")), &otlp).await;
        let payments = GoService::start(&payments_bin).await;
        let payments_sidecar = Proxy::start(payments.addr, Some(&sidecar("payments")), &otlp).await;

        let (egress, payments_at) = (free_port(), free_port());
        let mut command = Command::new(&python);
        command
            .arg(repo().join("interop/fleet/orders.py"))
            .env_remove("NO_PROXY")
            .env_remove("no_proxy")
            .env("HTTP_PROXY", format!("http://127.0.0.1:{egress}"))
            .env("STOCK_URL", format!("http://{}", stock_sidecar.addr))
            .env("PAYMENTS_AT", format!("127.0.0.1:{payments_at}"))
            .env("ORDERS_MODE", orders_mode.env())
            .env("OTEL_SERVICE_NAME", "orders")
            .env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &audit.endpoint)
            .env("OTEL_BSP_SCHEDULE_DELAY", "100");
        let orders = Service::spawn(command).await;
        let orders_sidecar = Proxy::start(
            orders.addr,
            Some(&sidecar("orders")),
            &[
                &otlp[..],
                &["--egress", &format!("127.0.0.1:{egress}")],
                &[
                    "--egress-to",
                    &format!("127.0.0.1:{payments_at}={}", payments_sidecar.addr),
                ],
            ]
            .concat(),
        )
        .await;

        let orders_at = free_port();
        let mut command = Command::new(&node);
        command
            .arg(repo().join("interop/fleet/web.js"))
            .env("NODE_PATH", &node_modules)
            .env("ORDERS_AT", format!("127.0.0.1:{orders_at}"))
            .env("OTEL_SERVICE_NAME", "web")
            .env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &audit.endpoint)
            .env("OTEL_BSP_SCHEDULE_DELAY", "100");
        let web = Service::spawn(command).await;
        let web_sidecar = Proxy::start(
            web.addr,
            Some(&sidecar("web")),
            &[
                &otlp[..],
                &[
                    "--egress-to",
                    &format!("127.0.0.1:{orders_at}={}", orders_sidecar.addr),
                ],
            ]
            .concat(),
        )
        .await;
        Some(Fleet {
            web,
            orders,
            stock,
            payments,
            sidecars: vec![web_sidecar, orders_sidecar, stock_sidecar, payments_sidecar],
            audit,
        })
    }

    /// `GET /checkout` with 800 ms and no `traceparent`, as a browser sends it: answered 200;
    /// what each service was told.
    async fn checkout(&mut self) -> Told {
        let answer = get(
            self.sidecars[0].addr,
            "/checkout",
            &[("x-request-timeout-ms", &BUDGET.to_string())],
        )
        .await
        .unwrap();
        assert_eq!(answer.status, 200, "{answer:?}");
        let web = ms_after(&self.web.next_line().await, "told=");
        let orders = ms_after(&self.orders.next_line().await, "told=");
        let stock = ms_after(&self.stock.next_line().await, "told=");
        let payments = ms_after(&self.payments.next_line().await, "deadline_ms=");
        Told {
            web,
            orders,
            stock,
            payments,
        }
    }

    /// Stop the services, then their sidecars (each flushes its spans on SIGTERM), then ask
    /// the audit for its verdict.
    async fn verdict(mut self) -> (Option<i32>, String) {
        assert!(self.web.terminate().await.success(), "web exits cleanly");
        assert!(
            self.orders.terminate().await.success(),
            "orders exits cleanly"
        );
        for sidecar in &mut self.sidecars {
            let status = terminate(&mut sidecar.child).await;
            assert!(status.success(), "a sidecar exits cleanly: {status:?}");
        }
        self.audit.verdict().await
    }
}

/// Every service was told at most what its caller had left, minus the margin.
fn assert_shrinks(told: &Told) {
    assert!(told.web + MARGIN <= BUDGET, "{told:?}");
    assert!(told.orders + MARGIN <= told.web, "{told:?}");
    assert!(told.stock + MARGIN <= told.orders, "{told:?}");
    assert!(told.payments + MARGIN <= told.orders, "{told:?}");
}

/// Slow `stock` work under an 800 ms request stops by stock's deadline, and every hop above
/// answers 504: C4 and C5 through four sidecars and three languages.
async fn slow_work_stops_by_the_deadline(fleet: &mut Fleet) {
    let answer = get(
        fleet.sidecars[0].addr,
        "/checkout?slow=1",
        &[("x-request-timeout-ms", &BUDGET.to_string())],
    )
    .await
    .unwrap();
    assert_eq!(answer.status, 504, "{answer:?}");
    let web = ms_after(&fleet.web.next_line().await, "told=");
    let orders = ms_after(&fleet.orders.next_line().await, "told=");
    let stock = ms_after(&fleet.stock.next_line().await, "told=");
    assert!(
        stock + MARGIN <= orders && orders + MARGIN <= web,
        "{web} {orders} {stock}"
    );
    let stopped = fleet.stock.next_line().await;
    assert!(stopped.starts_with("stock stopped"), "{stopped}");
    // stock's work takes 5,000 ms when nothing stops it; its own context ends it 20 ms before
    // what it was told, and its sidecar ends the request 6 ms after. The bound below only
    // tells those apart from work that ran on: it is no timing measurement.
    let after = ms_after(&stopped, "after=");
    assert!(
        after <= stock + 500,
        "stock worked {after} ms on a {stock} ms budget"
    );
}

/// A fleet with `orders` in `mode` holds the contract: every service is told at most what
/// its caller had left minus the margin, slow work stops by the deadline, and the audit
/// passes it with no false alarm.
async fn the_fleet_keeps_the_contract(mode: Orders) {
    let Some(mut fleet) = Fleet::start(mode).await else {
        return;
    };
    for _ in 0..REQUESTS {
        let told = fleet.checkout().await;
        assert_shrinks(&told);
    }
    slow_work_stops_by_the_deadline(&mut fleet).await;
    let (code, report) = fleet.verdict().await;
    assert_eq!(code, Some(0), "{report}");
    for service in ["web", "orders", "stock", "payments"] {
        assert!(
            report.contains(service),
            "{service} is in the report:\n{report}"
        );
    }
    // What the audit once said of such a fleet, wrongly: the spans that ended because the
    // deadline fired are no default timeout, every hop forwarded its deadline, and a reset
    // its sidecar capped is no break.
    for wrong in ["deadline dropped", "a default timeout firing", "ERROR"] {
        assert!(!report.contains(wrong), "{wrong:?} in:\n{report}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_fleet_shrinks_the_budget_at_every_hop_and_the_audit_passes_it() {
    let _module = crate::support::serial::module(module_path!());
    the_fleet_keeps_the_contract(Orders::Healthy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_forgetful_orders_the_budget_still_shrinks_and_the_audit_passes_it() {
    let _module = crate::support::serial::module(module_path!());
    the_fleet_keeps_the_contract(Orders::Forgetful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orders_that_carries_no_trace_context_is_a_break_the_audit_names() {
    let _module = crate::support::serial::module(module_path!());
    let Some(mut fleet) = Fleet::start(Orders::Untraced).await else {
        return;
    };
    for _ in 0..REQUESTS {
        let told = fleet.checkout().await;
        // The break is real: orders' calls match no request, and get the edge total.
        assert!(told.stock > told.orders, "{told:?}");
    }
    let (code, report) = fleet.verdict().await;
    assert_eq!(code, Some(1), "{report}");
    assert!(
        report.contains("outbound call from orders to")
            && report.contains("matched no inbound request"),
        "the audit names orders:\n{report}"
    );
}
