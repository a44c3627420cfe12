//! `hopbudget proxy` in front of services written in Go, over loopback (C25, issue #37 item
//! 3): a `net/http` service whose handler must see `r.Context()` cancelled at the deadline,
//! and a grpc-go service whose `ctx.Deadline()` must be what the proxy forwarded (the
//! caller's budget minus the margin) and whose context must end at the deadline, or when the
//! caller leaves.
//!
//! Needs Go and Debian's grpc-go (`apt-get install golang-go golang-google-grpc-dev`); the
//! tests build `interop/go_http_service` and `interop/grpcgo_service` into the target dir.
//! Without them each test says so and passes, unless `HOPBUDGET_REQUIRE_SERVICES=1`, where it
//! fails. By hand: `cargo test -p hopbudget-cli --test proxy_go`.

#[path = "proxy_support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::sync::OnceLock;

use support::go::{GoService, build, skip_unless_built};
use support::{PATIENCE, Proxy, field, get as http_get, grpc_call, query_encode, send_head, told};

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
    let Some(program) = http_service() else {
        return;
    };
    let mut service = GoService::start(&program).await;
    let proxy = Proxy::start(service.addr, None, &[]).await;

    let answer = http_get(proxy.addr, "/wait", &[("x-request-timeout-ms", "400")])
        .await
        .unwrap();
    assert_eq!(answer.status, 504, "{answer:?}");
    assert_eq!(answer.header("x-deadline-outcome"), Some("expired"));

    let arrived = service.next_line().await;
    let told: u64 = field(&arrived, "x-request-timeout-ms").parse().unwrap();
    assert!(told <= 394 && told > 0, "the service was told {told} ms");
    // The proxy closed the connection the request was on: Go cancelled the handler's context.
    assert_eq!(service.next_line().await, "cancelled err=context canceled");
    proxy.await_outcome("expired", 1).await;
}

#[tokio::test]
async fn a_go_handlers_request_context_is_cancelled_when_the_caller_leaves() {
    let Some(program) = http_service() else {
        return;
    };
    let mut service = GoService::start(&program).await;
    let proxy = Proxy::start(service.addr, None, &[]).await;

    let caller = send_head(
        proxy.addr,
        "GET",
        "/wait",
        &[("x-request-timeout-ms", "20000")],
    )
    .await
    .unwrap();
    assert!(service.next_line().await.starts_with("arrived"));
    drop(caller);
    assert_eq!(service.next_line().await, "cancelled err=context canceled");
    proxy.await_outcome("cancelled", 1).await;
}

#[tokio::test]
async fn grpc_go_gets_the_forwarded_deadline_and_its_context_ends_at_it() {
    let Some(program) = grpc_service() else {
        return;
    };
    let mut service = GoService::start(&program).await;
    let proxy = Proxy::start(service.addr, None, &[]).await;

    let (code, message) = grpc_call(proxy.addr, "/proxy.Test/Wait", &[("grpc-timeout", "400m")])
        .await
        .unwrap();
    assert_eq!(code, "4", "DEADLINE_EXCEEDED, got {code} {message:?}");

    let arrived = service.next_line().await;
    assert!(arrived.starts_with("arrived /proxy.Test/Wait"), "{arrived}");
    // grpc-go's own ctx.Deadline(), from the grpc-timeout the proxy restated: the caller's
    // 400 ms minus the 6 ms margin and transit (C2), less what the trip took.
    let left: i64 = field(&arrived, "deadline_ms").parse().unwrap();
    assert!(left <= 394 && left > 0, "ctx.Deadline() left {left} ms");
    let ended = service.next_line().await;
    assert!(
        ended == "cancelled err=context deadline exceeded"
            || ended == "cancelled err=context canceled",
        "{ended}"
    );
    proxy.await_outcome("expired", 1).await;
}

#[tokio::test]
async fn grpc_go_is_answered_by_the_proxy_for_malformed_and_refused_calls() {
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
    let Some(program) = grpc_service() else {
        return;
    };
    let mut service = GoService::start(&program).await;
    let proxy = Proxy::start(service.addr, None, &[]).await;

    let addr = proxy.addr;
    let call = tokio::spawn(async move {
        grpc_call(addr, "/proxy.Test/Wait", &[("grpc-timeout", "20S")]).await
    });
    assert!(service.next_line().await.starts_with("arrived"));
    // The caller goes away: its connection, and with it the call, is gone.
    call.abort();
    assert_eq!(service.next_line().await, "cancelled err=context canceled");
    tokio::time::timeout(PATIENCE, proxy.await_outcome("cancelled", 1))
        .await
        .unwrap();
}

/// S23 with Go services: A keeps its deadline and calls B, B forgets it and calls C, each
/// behind its own proxy, the calls out through the proxies' egress. The budget still shrinks
/// by at least two margins a hop (the egress's and the next ingress's, C2), and the deepest
/// service's work is stopped at its deadline.
#[tokio::test]
async fn s23_a_chain_of_go_services_with_a_forgetful_hop_shrinks_and_stops_at_the_deadline() {
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
