//! The two things every service behind the proxy is put through, whatever its language (C4,
//! C5, C25): its request reaches the deadline, or its caller leaves first. Each returns what
//! the service printed, for the test to hold against what its framework promises.

use super::service::Service;
use super::{PATIENCE, Proxy, field, get, grpc_call, send_head, told};

/// `GET /wait` with a 400 ms budget through `proxy`: the caller is answered 504 `expired` by
/// the proxy, the service was told the 400 ms less the margin and transit (C2, in
/// `x-request-timeout-ms`), and the proxy recorded `expired`. Returns the line the service
/// printed when its work ended.
pub async fn http_deadline(service: &mut Service, proxy: &Proxy) -> String {
    let answer = get(proxy.addr, "/wait", &[("x-request-timeout-ms", "400")])
        .await
        .unwrap();
    assert_eq!(answer.status, 504, "{answer:?}");
    assert_eq!(answer.header("x-deadline-outcome"), Some("expired"));
    let told = told(&service.next_line().await);
    assert!(told <= 394 && told > 0, "the service was told {told} ms");
    let ended = service.next_line().await;
    proxy.await_outcome("expired", 1).await;
    ended
}

/// `GET /wait` with 20 s through `proxy`, abandoned by its caller once the service printed
/// `arrived`: only the proxy ending the request can stop the work this early, and it records
/// `cancelled`. Returns the line the service printed when its work ended.
pub async fn http_caller_leaves(service: &mut Service, proxy: &Proxy) -> String {
    let caller = send_head(
        proxy.addr,
        "GET",
        "/wait",
        &[("x-request-timeout-ms", "20000")],
    )
    .await
    .unwrap();
    let arrived = service.next_line().await;
    assert!(arrived.starts_with("arrived"), "{arrived}");
    drop(caller);
    let ended = service.next_line().await;
    proxy.await_outcome("cancelled", 1).await;
    ended
}

/// A unary gRPC call to `/proxy.Test/Wait` with `grpc-timeout: 400m` through `proxy`: the
/// caller reads DEADLINE_EXCEEDED, the service's own deadline (its `deadline_ms=` field, from
/// the `grpc-timeout` the proxy restated) is the 400 ms less the margin and transit (C2), and
/// the proxy recorded `expired`. Returns the line the service printed when its call ended.
pub async fn grpc_deadline(service: &mut Service, proxy: &Proxy) -> String {
    let (code, message) = grpc_call(proxy.addr, "/proxy.Test/Wait", &[("grpc-timeout", "400m")])
        .await
        .unwrap();
    assert_eq!(code, "4", "DEADLINE_EXCEEDED, got {code} {message:?}");
    let arrived = service.next_line().await;
    assert!(arrived.starts_with("arrived /proxy.Test/Wait"), "{arrived}");
    let left: i64 = field(&arrived, "deadline_ms")
        .parse()
        .unwrap_or_else(|_| panic!("the service saw no deadline: {arrived}"));
    assert!(
        left <= 394 && left > 0,
        "the service's deadline left {left} ms"
    );
    let ended = service.next_line().await;
    proxy.await_outcome("expired", 1).await;
    ended
}

/// A unary gRPC call with 20 s through `proxy`, abandoned by its caller once the service
/// printed `arrived`: the proxy resets the stream and records `cancelled`. Returns the line
/// the service printed when its call ended.
pub async fn grpc_caller_leaves(service: &mut Service, proxy: &Proxy) -> String {
    let addr = proxy.addr;
    let call = tokio::spawn(async move {
        grpc_call(addr, "/proxy.Test/Wait", &[("grpc-timeout", "20S")]).await
    });
    let arrived = service.next_line().await;
    assert!(arrived.starts_with("arrived"), "{arrived}");
    // The caller goes away: its connection, and with it the call, is gone.
    call.abort();
    let ended = service.next_line().await;
    tokio::time::timeout(PATIENCE, proxy.await_outcome("cancelled", 1))
        .await
        .unwrap();
    ended
}
