//! `hopbudget proxy` in front of services written in Python and Node, over loopback (C25,
//! issue #37 item 3), and S23: a chain Go -> Python -> Node, each behind its own proxy, one
//! of them forgetful, where the budget still shrinks hop by hop and the deepest service's work
//! stops at the deadline.
//!
//! The services: `interop/python_service.py` (`http`: the standard library's
//! `ThreadingHTTPServer`; `grpc`: a grpcio server), `interop/node_service.js` (Node's `http`
//! module) and `interop/go_http_service`. Each prints what its handler was told and how its
//! work ended. Needs `python3` (grpcio for the gRPC tests: `HOPBUDGET_PYTHON`, which
//! `scripts/test-all` points at `target/pyvenv`), `node` (`HOPBUDGET_NODE`) and Go
//! (`apt-get install golang-go`). Without one, its tests say so and pass, unless
//! `HOPBUDGET_REQUIRE_SERVICES=1`, where they fail. By hand:
//! `cargo test -p hopbudget-cli --test fleet polyglot::`.

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::support::proxy::go::{build, skip_unless_built};
use crate::support::proxy::service::Service;
use crate::support::proxy::{Proxy, get as http_get, program, query_encode, scenario, told};
use tokio::process::Command;

fn python() -> Option<String> {
    program(
        "HOPBUDGET_PYTHON",
        "python3",
        &["-c", "import http.server"],
        "install python3",
    )
}

fn python_with_grpcio() -> Option<String> {
    program(
        "HOPBUDGET_PYTHON",
        "python3",
        &["-c", "import grpc"],
        "`python3 -m venv target/pyvenv && target/pyvenv/bin/pip install grpcio` (as \
         scripts/test-all does) and HOPBUDGET_PYTHON=target/pyvenv/bin/python",
    )
}

fn node() -> Option<String> {
    program("HOPBUDGET_NODE", "node", &["--version"], "install node")
}

fn go_http_service() -> Option<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    skip_unless_built(BUILT.get_or_init(|| build("go_http_service", "")))
}

fn interop(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../interop")
        .join(name)
}

async fn python_service(python: &str, mode: &str) -> Service {
    let mut command = Command::new(python);
    command.arg(interop("python_service.py")).arg(mode);
    Service::spawn(command).await
}

async fn node_service(node: &str) -> Service {
    let mut command = Command::new(node);
    command.arg(interop("node_service.js"));
    Service::spawn(command).await
}

/// A Python HTTP service learns that the proxy ended its request by reading EOF on the
/// connection: the proxy closed it at the deadline.
#[tokio::test]
async fn a_python_http_service_is_told_the_budget_and_its_work_stops_at_the_deadline() {
    let _module = crate::support::serial::module(module_path!());
    let Some(python) = python() else {
        return;
    };
    let mut service = python_service(&python, "http").await;
    let proxy = Proxy::start(service.addr, None, &[]).await;
    // The proxy closed the connection: the service's next read sees EOF or a reset.
    let ended = scenario::http_deadline(&mut service, &proxy).await;
    assert!(ended.starts_with("cancelled by="), "{ended}");
}

#[tokio::test]
async fn a_python_http_services_work_stops_when_the_caller_leaves() {
    let _module = crate::support::serial::module(module_path!());
    let Some(python) = python() else {
        return;
    };
    let mut service = python_service(&python, "http").await;
    let proxy = Proxy::start(service.addr, None, &[]).await;
    let ended = scenario::http_caller_leaves(&mut service, &proxy).await;
    assert!(ended.starts_with("cancelled by="), "{ended}");
}

/// grpcio installs the `grpc-timeout` the proxy restated as the call's deadline:
/// `context.time_remaining()` is the caller's budget minus the margin, and
/// `context.is_active()` turns false at the deadline.
#[tokio::test]
async fn grpcio_gets_the_forwarded_deadline_and_is_active_turns_false_at_it() {
    let _module = crate::support::serial::module(module_path!());
    let Some(python) = python_with_grpcio() else {
        return;
    };
    let mut service = python_service(&python, "grpc").await;
    let proxy = Proxy::start(service.addr, None, &[]).await;
    // grpcio's context.time_remaining(), from the grpc-timeout the proxy restated.
    let ended = scenario::grpc_deadline(&mut service, &proxy).await;
    assert_eq!(ended, "cancelled active=false");
}

/// With a 20 s budget, only the proxy resetting the stream can end the call early: grpcio's
/// `is_active()` turns false when the caller leaves.
#[tokio::test]
async fn grpcios_call_stops_being_active_when_the_caller_leaves() {
    let _module = crate::support::serial::module(module_path!());
    let Some(python) = python_with_grpcio() else {
        return;
    };
    let mut service = python_service(&python, "grpc").await;
    let proxy = Proxy::start(service.addr, None, &[]).await;
    let ended = scenario::grpc_caller_leaves(&mut service, &proxy).await;
    assert_eq!(ended, "cancelled active=false");
}

/// Node's `http` module fires the response's `close` before it finished when the proxy closes
/// the connection at the deadline.
#[tokio::test]
async fn a_node_http_service_is_told_the_budget_and_its_response_closes_at_the_deadline() {
    let _module = crate::support::serial::module(module_path!());
    let Some(node) = node() else {
        return;
    };
    let mut service = node_service(&node).await;
    let proxy = Proxy::start(service.addr, None, &[]).await;
    let ended = scenario::http_deadline(&mut service, &proxy).await;
    assert_eq!(ended, "cancelled by=close");
}

#[tokio::test]
async fn a_node_http_services_response_closes_when_the_caller_leaves() {
    let _module = crate::support::serial::module(module_path!());
    let Some(node) = node() else {
        return;
    };
    let mut service = node_service(&node).await;
    let proxy = Proxy::start(service.addr, None, &[]).await;
    let ended = scenario::http_caller_leaves(&mut service, &proxy).await;
    assert_eq!(ended, "cancelled by=close");
}

/// S23: Go (A) keeps its deadline and calls Python (B), which forgets it and gives its call to
/// Node (C) a fresh 30 s of its own; each behind its own proxy. A's call leaves through its
/// proxy's `--egress-to` listener, B's through its proxy's `--egress` HTTP proxy, both
/// matched to the request they belong to by the `traceparent` each service copies from its
/// inbound request. The budget shrinks by at least two margins a hop (the egress's and the
/// next ingress's, C2), B's fresh 30 s does not win (C16), and C's work stops at its deadline.
#[tokio::test]
async fn s23_go_python_node_chain_with_a_forgetful_hop_shrinks_and_stops_at_the_deadline() {
    let _module = crate::support::serial::module(module_path!());
    let (Some(go), Some(python), Some(node)) = (go_http_service(), python(), node()) else {
        return;
    };
    let trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    // A small edge total, so a budget that was lost (and replaced by it) shows.
    let profile = Some("edge_total_ms: 100");
    let mut c = node_service(&node).await;
    let pc = Proxy::start(c.addr, profile, &[]).await;
    let mut b = python_service(&python, "http").await;
    let pb = Proxy::start(b.addr, profile, &["--egress", "127.0.0.1:0"]).await;
    let mut a = Service::start(&go).await;
    let to_b = format!("127.0.0.1:0={}", pb.addr);
    let pa = Proxy::start(a.addr, profile, &["--egress-to", &to_b]).await;

    // B's outbound call goes to C's proxy by name, through B's proxy as its HTTP proxy.
    let c_url = format!("http://{}/wait", pc.addr);
    let via = format!("http://{}", pb.egress.unwrap());
    let b_url = format!(
        "http://{}/forward?fresh=30000&via={}&to={}",
        pa.egress_to[0],
        query_encode(&via),
        query_encode(&c_url)
    );
    let path = format!("/forward?keep=1&to={}", query_encode(&b_url));
    let caller = [("x-request-timeout-ms", "1500"), ("traceparent", trace)];
    let answer = http_get(pa.addr, &path, &caller).await.unwrap();
    assert_eq!(answer.status, 504, "{answer:?}");

    let (ta, tb, tc) = (
        told(&a.next_line().await),
        told(&b.next_line().await),
        told(&c.next_line().await),
    );
    eprintln!("told: A (Go) {ta} ms, B (Python) {tb} ms, C (Node) {tc} ms");
    assert!(ta <= 1494, "A (Go) was told {ta}");
    assert!(tb + 12 <= ta, "B (Python) was told {tb} after A's {ta}");
    assert!(tc + 12 <= tb, "C (Node) was told {tc} after B's {tb}");
    assert!(
        tc > 1000,
        "C was told {tc}: B forgot the deadline, its proxy must not have"
    );
    // The deepest service's work stopped: its proxy closed the connection at the deadline.
    assert_eq!(c.next_line().await, "cancelled by=close");
    pc.await_outcome("expired", 1).await;
}
