//! `hopbudget proxy` in front of services written in Go, over loopback (C25, issue #37 item
//! 3): a `net/http` service whose handler must see `r.Context()` cancelled at the deadline,
//! and a grpc-go service whose `ctx.Deadline()` must be what the proxy forwarded (the
//! caller's budget minus the margin) and whose context must end at the deadline, or when the
//! caller leaves.
//!
//! Needs Go and Debian's grpc-go (`apt-get install golang-go golang-google-grpc-dev`); the
//! tests build `interop/go_http_service` and `interop/grpcgo_service` into the target dir.
//! Without them each test says so and passes, unless `HOPBUDGET_REQUIRE_SERVICES=1`, where it
//! fails. By hand: `cargo test -p hopbudget-cli --test fleet go::`.

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::support::proxy;
use crate::support::proxy::go::{GoService, build, skip_unless_built};
use crate::support::proxy::{
    Proxy, field, get as http_get, grpc_call, query_encode, scenario, told,
};

fn http_service() -> Option<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    skip_unless_built(BUILT.get_or_init(|| build("go_http_service", "")))
}

fn grpc_service() -> Option<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    skip_unless_built(BUILT.get_or_init(|| build("grpcgo_service", "golang-google-grpc-dev")))
}

#[tokio::test]
async fn a_go_handlers_request_context_is_cancelled_at_the_deadline() {
    let _module = crate::support::serial::module(module_path!());
    let Some(program) = http_service() else {
        return;
    };
    let mut service = GoService::start(&program).await;
    let proxy = Proxy::start(service.addr, None, &[]).await;
    // The proxy closed the connection the request was on: Go cancelled the handler's context.
    let ended = scenario::http_deadline(&mut service, &proxy).await;
    assert_eq!(ended, "cancelled err=context canceled");
}

#[tokio::test]
async fn a_go_handlers_request_context_is_cancelled_when_the_caller_leaves() {
    let _module = crate::support::serial::module(module_path!());
    let Some(program) = http_service() else {
        return;
    };
    let mut service = GoService::start(&program).await;
    let proxy = Proxy::start(service.addr, None, &[]).await;
    let ended = scenario::http_caller_leaves(&mut service, &proxy).await;
    assert_eq!(ended, "cancelled err=context canceled");
}

#[tokio::test]
async fn grpc_go_gets_the_forwarded_deadline_and_its_context_ends_at_it() {
    let _module = crate::support::serial::module(module_path!());
    let Some(program) = grpc_service() else {
        return;
    };
    let mut service = GoService::start(&program).await;
    let proxy = Proxy::start(service.addr, None, &[]).await;
    // grpc-go's own ctx.Deadline(), from the grpc-timeout the proxy restated.
    let ended = scenario::grpc_deadline(&mut service, &proxy).await;
    assert!(
        ended == "cancelled err=context deadline exceeded"
            || ended == "cancelled err=context canceled",
        "{ended}"
    );
}

#[tokio::test]
async fn grpc_go_is_answered_by_the_proxy_for_malformed_and_refused_calls() {
    let _module = crate::support::serial::module(module_path!());
    let Some(program) = grpc_service() else {
        return;
    };
    let mut service = GoService::start(&program).await;
    let profile = "routes: [{path: /proxy.Test/Echo, min_budget_ms: 200}]";
    let proxy = Proxy::start(service.addr, Some(profile), &[]).await;

    let (code, message) = grpc_call(proxy.addr, "/proxy.Test/Echo", &[("grpc-timeout", "10s")])
        .await
        .unwrap();
    assert_eq!(code, "3", "INVALID_ARGUMENT, got {code} {message:?}");
    assert!(message.contains("grpc-timeout"), "{message}");
    let (code, _) = grpc_call(proxy.addr, "/proxy.Test/Echo", &[("grpc-timeout", "120m")])
        .await
        .unwrap();
    assert_eq!(code, "4", "refused as DEADLINE_EXCEEDED");
    let (code, _) = grpc_call(proxy.addr, "/proxy.Test/Echo", &[("grpc-timeout", "2S")])
        .await
        .unwrap();
    assert_eq!(code, "0");
    // Only the third call reached the service.
    let arrived = service.next_line().await;
    let left: i64 = field(&arrived, "deadline_ms").parse().unwrap();
    assert!(left <= 1994 && left > 1000, "{arrived}");
    proxy.await_outcome("refused", 1).await;
}

#[tokio::test]
async fn grpc_gos_context_is_cancelled_when_the_caller_leaves() {
    let _module = crate::support::serial::module(module_path!());
    let Some(program) = grpc_service() else {
        return;
    };
    let mut service = GoService::start(&program).await;
    let proxy = Proxy::start(service.addr, None, &[]).await;
    let ended = scenario::grpc_caller_leaves(&mut service, &proxy).await;
    assert_eq!(ended, "cancelled err=context canceled");
}

/// S23 with Go services: A keeps its deadline and calls B, B forgets it and calls C, each
/// behind its own proxy, the calls out through the proxies' egress. The budget still shrinks
/// by at least two margins a hop (the egress's and the next ingress's, C2), and the deepest
/// service's work is stopped at its deadline.
#[tokio::test]
async fn s23_a_chain_of_go_services_with_a_forgetful_hop_shrinks_and_stops_at_the_deadline() {
    let _module = crate::support::serial::module(module_path!());
    let Some(program) = http_service() else {
        return;
    };
    let trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    // A small edge total, so a budget that was lost (and replaced by it) shows.
    let profile = Some("edge_total_ms: 100");
    let mut c = GoService::start(&program).await;
    let pc = Proxy::start(c.addr, profile, &[]).await;
    let mut b = GoService::start(&program).await;
    let to_c = format!("127.0.0.1:0={}", pc.addr);
    let pb = Proxy::start(b.addr, profile, &["--egress-to", &to_c]).await;
    let mut a = GoService::start(&program).await;
    let to_b = format!("127.0.0.1:0={}", pb.addr);
    let pa = Proxy::start(a.addr, profile, &["--egress-to", &to_b]).await;

    let c_url = format!("http://{}/wait", pb.egress_to[0]);
    let b_url = format!(
        "http://{}/forward?to={}",
        pa.egress_to[0],
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
    assert!(ta <= 1494, "A was told {ta}");
    assert!(tb + 12 <= ta, "B was told {tb} after A's {ta}");
    assert!(tc + 12 <= tb, "C was told {tc} after B's {tb}");
    assert!(
        tc > 1000,
        "C was told {tc}: B forgot the deadline, its proxy must not have"
    );
    assert_eq!(c.next_line().await, "cancelled err=context canceled");
    pc.await_outcome("expired", 1).await;
}

fn tls_client() -> Option<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    skip_unless_built(BUILT.get_or_init(|| build("go_tls_client", "")))
}

/// A Go client over TLS (#46 item 7): `net/http` with a CA file reaches the proxy's TLS
/// ingress, negotiates HTTP/2 by ALPN, and its budget reaches the service restated.
#[tokio::test]
async fn a_go_client_reaches_the_proxy_over_tls_with_its_budget() {
    let _module = crate::support::serial::module(module_path!());
    let Some(client) = tls_client() else {
        return;
    };
    let echo = axum::Router::new().route(
        "/echo",
        axum::routing::get(|headers: axum::http::HeaderMap| async move {
            proxy::headers_text(&headers)
        }),
    );
    let service = proxy::serve(echo).await;
    let made = proxy::certificate::Certificate::new("go-tls", "localhost");
    let (cert, key) = (made.cert_arg(), made.key_arg());
    let proxy = Proxy::start(service, None, &["--tls-cert", cert, "--tls-key", key]).await;
    let url = format!("https://localhost:{}/echo", proxy.addr.port());
    let out = tokio::process::Command::new(&client)
        .args([url.as_str(), cert, "1000"])
        .output()
        .await
        .expect("the Go client runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("proto=HTTP/2.0\n") && text.contains("status=200\n"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let told: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("x-request-timeout-ms: "))
        .expect("the service was told a budget")
        .parse()
        .unwrap();
    assert!(told < 1000, "{text}");
}
