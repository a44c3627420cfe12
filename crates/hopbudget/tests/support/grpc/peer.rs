//! The interop checks every gRPC implementation that is not tonic must pass, shared by
//! `tests/grpc/peer_grpcio.rs`, `tests/grpc/peer_grpcjs.rs` and `tests/grpc/peer_grpcgo.rs`: each brings only
//! the way to drive its peer (a client call that answers with one JSON line, read by
//! [`client_answer`]; a server command that prints its port).

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use hopbudget::Profile;
use hopbudget_testkit::HOP_CALL_PATH;
use hopbudget_testkit::pb::CallReply;
use prost::Message;

use super::{budget, call, grpc_client, serve_profile};

/// What a peer's client printed: one JSON line, after it exited successfully.
pub fn client_answer(peer: &str, out: std::io::Result<std::process::Output>) -> serde_json::Value {
    let out = out.unwrap_or_else(|e| panic!("cannot run the {peer} client: {e}"));
    assert!(
        out.status.success(),
        "{peer} client failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON line")
}

/// Decode the peer's `reply_hex`.
fn hex_decode(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// The peer as a client of `GrpcServerLayer`: `peer_call(addr, request bytes, deadline)` makes
/// one unary call to [`HOP_CALL_PATH`] with the peer's own deadline and answers
/// `{"code": "OK" | status name, "reply_hex": ..., "trailers": {...}}`.
///
/// 1. The peer's 2 s deadline arrives as `grpc-timeout` and becomes the hop's budget.
/// 2. 100 ms against a route that needs 200 ms: refused before the handler, and the peer sees
///    DEADLINE_EXCEEDED with the refusal and what it needed in the trailers.
/// 3. 300 ms with 5 s of work: expiry, which the peer sees as DEADLINE_EXCEEDED, and the
///    handler's work stops.
pub async fn client_deadline_is_read_refused_and_expired<F, Fut>(peer: &str, peer_call: F)
where
    F: Fn(SocketAddr, Vec<u8>, Duration) -> Fut,
    Fut: Future<Output = serde_json::Value>,
{
    let server = serve_profile(
        "interop",
        Profile::from_yaml(
            &format!("routes:\n  - path: {HOP_CALL_PATH}\n    min_budget_ms: 200\n"),
            "interop.yaml",
        )
        .unwrap(),
    )
    .await;

    let ok = peer_call(
        server.addr,
        call(&[], 0).encode_to_vec(),
        Duration::from_secs(2),
    )
    .await;
    assert_eq!(ok["code"], "OK", "{peer}: {ok}");
    let reply =
        CallReply::decode(hex_decode(ok["reply_hex"].as_str().unwrap()).as_slice()).unwrap();
    assert_eq!(reply.source, ["grpc-timeout"], "{peer}: {reply:?}");
    let seen = Duration::from_micros(reply.remaining_us[0]);
    assert!(
        seen <= Duration::from_secs(2) && seen > Duration::from_millis(1500),
        "{peer}'s 2 s deadline arrived as {seen:?} (raw header {:?})",
        reply.grpc_timeout
    );

    let before = server.stats.entered();
    let refused = peer_call(
        server.addr,
        call(&[], 0).encode_to_vec(),
        Duration::from_millis(100),
    )
    .await;
    assert_eq!(refused["code"], "DEADLINE_EXCEEDED", "{peer}: {refused}");
    assert_eq!(
        refused["trailers"]["x-deadline-outcome"], "refused",
        "{peer}: {refused}"
    );
    assert_eq!(
        refused["trailers"]["x-deadline-required-ms"], "200",
        "{peer}: {refused}"
    );
    assert_eq!(server.stats.entered(), before, "the handler never ran");

    let expired = peer_call(
        server.addr,
        call(&[], 5_000).encode_to_vec(),
        Duration::from_millis(300),
    )
    .await;
    assert_eq!(expired["code"], "DEADLINE_EXCEEDED", "{peer}: {expired}");
    assert!(
        server
            .stats
            .wait_for(Duration::from_secs(2), |s| s.live() == 0)
            .await,
        "the handler's work stopped"
    );
}

/// The peer as the server behind `GrpcClientLayer`: `server` starts it on `127.0.0.1`, printing
/// its port on the first line, and it answers every call with trailing metadata
/// `x-time-remaining-ms`: what its own deadline API said was left when the call arrived. A
/// 400 ms budget is forwarded as 400 - 5 - 1 ms, rounded down.
pub async fn server_sees_the_deadline_the_client_layer_stamps(
    peer: &str,
    mut server: tokio::process::Command,
) {
    use tokio::io::AsyncBufReadExt;
    let mut child = server
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run the {peer} server: {e}"));
    let stdout = child.stdout.take().expect("piped");
    let port: u16 = tokio::io::BufReader::new(stdout)
        .lines()
        .next_line()
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("the {peer} server prints its port"))
        .trim()
        .parse()
        .unwrap();
    let mut client = grpc_client(&Profile::default(), &format!("http://127.0.0.1:{port}"));
    let reply = budget(400)
        .scope(client.call(call(&[], 0)))
        .await
        .unwrap_or_else(|status| panic!("{peer} did not answer: {status:?}"));
    let remaining: u64 = reply
        .metadata()
        .get("x-time-remaining-ms")
        .unwrap_or_else(|| panic!("no x-time-remaining-ms trailer from {peer}"))
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        remaining <= 394 && remaining > 200,
        "{peer}'s server saw {remaining} ms left"
    );
    drop(child);
}
