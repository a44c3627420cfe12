//! `hopbudget check` (issue #47) against the interop services in Go, Python and Node, and
//! grpc-go: each is forgetful, as most services are (it calls its downstream with the trace
//! context but no deadline). Checked on its own it fails the rules it breaks, and the
//! scorecard names them; behind `hopbudget proxy`, its call sent through the sidecar's
//! `--egress-to` listener, it passes.
//!
//! The services: `interop/go_http_service`, `interop/python_service.py`,
//! `interop/node_service.js` (`/forward?to=URL`) and `interop/grpcgo_service -downstream`.
//! Needs Go (`apt-get install golang-go golang-google-grpc-dev`), `python3` and `node`;
//! without one, its test says so and passes, unless `HOPBUDGET_REQUIRE_SERVICES=1`, where it
//! fails. By hand: `cargo test -p hopbudget-cli --test fleet check_interop::`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::OnceLock;

use crate::support::proxy::go::{build, skip_unless_built};
use crate::support::proxy::service::Service;
use crate::support::proxy::{Proxy, free_port, program, query_encode};
use crate::support::serial::CHECK;
use hopbudget_cli::check::scorecard::{Scorecard, Verdict};
use hopbudget_cli::check::{self, CheckArgs};
use tokio::process::Command;

fn free_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

fn interop(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../interop")
        .join(name)
}

fn args(target: String, downstream: SocketAddr, grpc: Option<&str>) -> CheckArgs {
    CheckArgs {
        target,
        downstream,
        route: None,
        min_budget: None,
        third_party: None,
        grpc: grpc.map(str::to_owned),
        json: false,
    }
}

/// The service's `/forward` route, calling `to`.
fn forward(addr: SocketAddr, to: SocketAddr) -> String {
    let to = format!("http://{to}/dep");
    format!("http://{addr}/forward?to={}", query_encode(&to))
}

/// The rules that failed.
fn failed(card: &Scorecard) -> Vec<&'static str> {
    card.lines
        .iter()
        .filter(|l| l.verdict == Verdict::Fail)
        .map(|l| l.rule)
        .collect()
}

/// Every rule passes but the two out of reach: the clock step and C19 (no third party).
fn assert_passes(card: &Scorecard, who: &str) {
    let text = card.text();
    for line in &card.lines {
        let expected = if ["C1-step", "C19"].contains(&line.rule) {
            Verdict::NotApplicable
        } else {
            Verdict::Pass
        };
        assert_eq!(line.verdict, expected, "{who}, {}:\n{text}", line.rule);
    }
}

/// An HTTP service with a `/forward` route, checked on its own (it calls the checker's
/// downstream) and then behind the sidecar (it calls the egress listener, which calls the
/// checker's downstream): the two scorecards.
async fn check_http_service(service: &Service) -> (Scorecard, Scorecard) {
    let _serial = CHECK.lock().await;
    let downstream = free_addr();
    let alone = check::check(&args(forward(service.addr, downstream), downstream, None))
        .await
        .unwrap();
    let downstream = free_addr();
    let to = format!("127.0.0.1:0={downstream}");
    // The route's minimum budget: the sidecar refuses a budget too small for the route at
    // the door, with `Retry-After` (C3). Without it the refusal is the egress's, and these
    // services, which relay the status but no header, drop its `Retry-After`.
    let profile = "routes: [{path: /forward, min_budget_ms: 50}]";
    let proxy = Proxy::start(service.addr, Some(profile), &["--egress-to", &to]).await;
    let behind = check::check(&args(
        forward(proxy.addr, proxy.egress_to[0]),
        downstream,
        None,
    ))
    .await
    .unwrap();
    (alone, behind)
}

/// What a forgetful service breaks, whatever its language: no deadline reaches its
/// downstream (C2, C8, C9, the tightest carrier), a malformed header is not rejected, a
/// budget too small to use is not refused (C3), and nothing answers 504 at the deadline
/// (C4). `also` is what this one breaks besides.
fn assert_forgetful(card: &Scorecard, who: &str, also: &[&str]) {
    let text = card.text();
    println!("{who}, on its own:\n{text}");
    let mut expected = vec!["C2", "C8", "C9", "tightest", "malformed", "C4"];
    expected.extend_from_slice(also);
    expected.push("C3");
    assert_eq!(failed(card), expected, "{who}:\n{text}");
    for rule in ["C2", "C8"] {
        assert!(
            card.line(rule)
                .unwrap()
                .observed
                .contains("no deadline reached the downstream"),
            "{who}:\n{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_go_http_service_fails_what_it_breaks_and_passes_behind_the_sidecar() {
    let _module = crate::support::serial::module(module_path!());
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let Some(program) = skip_unless_built(BUILT.get_or_init(|| build("go_http_service", "")))
    else {
        return;
    };
    let service = Service::start(&program).await;
    let (alone, behind) = check_http_service(&service).await;
    // Its call runs under r.Context(): a caller leaving cancels it (C5 kept).
    assert_forgetful(&alone, "Go", &[]);
    println!("Go, behind the sidecar:\n{}", behind.text());
    assert_passes(&behind, "Go behind the sidecar");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_http_service_fails_what_it_breaks_and_passes_behind_the_sidecar() {
    let _module = crate::support::serial::module(module_path!());
    let Some(python) = program(
        "HOPBUDGET_PYTHON",
        "python3",
        &["-c", "import http.server"],
        "install python3",
    ) else {
        return;
    };
    let mut command = Command::new(python);
    command.arg(interop("python_service.py")).arg("http");
    let service = Service::spawn(command).await;
    let (alone, behind) = check_http_service(&service).await;
    // urllib's call outlives a caller that left (C5).
    assert_forgetful(&alone, "Python", &["C5"]);
    println!("Python, behind the sidecar:\n{}", behind.text());
    assert_passes(&behind, "Python behind the sidecar");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_http_service_fails_what_it_breaks_and_passes_behind_the_sidecar() {
    let _module = crate::support::serial::module(module_path!());
    let Some(node) = program("HOPBUDGET_NODE", "node", &["--version"], "install node") else {
        return;
    };
    let mut command = Command::new(node);
    command.arg(interop("node_service.js"));
    let service = Service::spawn(command).await;
    let (alone, behind) = check_http_service(&service).await;
    // Its http.get outlives a caller that left (C5).
    assert_forgetful(&alone, "Node", &["C5"]);
    println!("Node, behind the sidecar:\n{}", behind.text());
    assert_passes(&behind, "Node behind the sidecar");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_go_service_fails_what_it_breaks_and_passes_the_grpc_cases_behind_the_sidecar() {
    let _module = crate::support::serial::module(module_path!());
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let Some(program) =
        skip_unless_built(BUILT.get_or_init(|| build("grpcgo_service", "golang-google-grpc-dev")))
    else {
        return;
    };
    let _serial = CHECK.lock().await;
    let method = Some("checked.Service/Call");

    // On its own: it calls the checker's downstream directly.
    let downstream = free_addr();
    let mut command = Command::new(&program);
    command.arg("-downstream").arg(downstream.to_string());
    let service = Service::spawn(command).await;
    let alone = check::check(&args(
        format!("http://{}", service.addr),
        downstream,
        method,
    ))
    .await
    .unwrap();
    let text = alone.text();
    println!("grpc-go, on its own:\n{text}");
    // grpc-go resets the stream of a call whose grpc-timeout it cannot read (PROTOCOL_ERROR)
    // rather than answer INVALID_ARGUMENT; its handler waits on a context.Background() call
    // past the deadline (C4) and after its caller left (C5).
    assert_eq!(
        failed(&alone),
        ["C2", "C8", "C9", "tightest", "malformed", "C4", "C5", "C3"],
        "{text}"
    );
    drop(service);

    // The service dials the egress listener, which must be known before either starts.
    let egress = free_addr();
    let mut command = Command::new(&program);
    command.arg("-downstream").arg(egress.to_string());
    let service = Service::spawn(command).await;
    let downstream = free_addr();
    let to = format!("{egress}={downstream}");
    let proxy = Proxy::start(service.addr, None, &["--egress-to", &to]).await;
    let card = check::check(&args(format!("http://{}", proxy.addr), downstream, method))
        .await
        .unwrap();
    println!("grpc-go, behind the sidecar:\n{}", card.text());
    assert_passes(&card, "grpc-go behind the sidecar");
}
