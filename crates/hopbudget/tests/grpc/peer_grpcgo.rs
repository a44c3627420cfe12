//! Interop with grpc-go, the reference gRPC implementation, beside grpcio
//! (`tests/grpc/peer_grpcio.rs`) and grpc-js (`tests/grpc/peer_grpcjs.rs`). Its deadlines are Go's
//! context deadlines: it writes `grpc-timeout` in its own units, and its client resets the
//! stream itself when the context ends, at the deadline or when cancelled. So beside the checks
//! every peer passes (`crate::grpc_support::peer`), it checks how the hop ends with a real client that
//! cancels (C5), and that the server's own expiry reaches it marked as such (C4).
//!
//! Needs Go and Debian's grpc-go (`apt-get install golang-go golang-google-grpc-dev`): the test
//! builds `interop/grpcgo_peer` into the test target's scratch directory from Debian's Go sources (see
//! `go_support`). `.ci/run` installs both. By hand:
//!
//! ```sh
//! apt-get install golang-go golang-google-grpc-dev
//! cargo test -p hopbudget --all-features --test grpc peer_grpcgo
//! ```
//!
//! Without them each test says so and passes, unless `HOPBUDGET_REQUIRE_SERVICES=1` (CI), where
//! it fails.
#![cfg(feature = "grpc")]

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use crate::grpc_support::*;
use hopbudget::{EndCause, Profile};
use hopbudget_testkit::HOP_CALL_PATH;
use prost::Message;

/// The peer, built once per test run by `go_support`.
fn peer() -> Option<tokio::process::Command> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    crate::go_support::peer(
        BUILT.get_or_init(|| crate::go_support::build("grpcgo_peer", "golang-google-grpc-dev")),
    )
}

/// Run the grpc-go client once (`cancel`: end its context early); its JSON answer.
async fn grpcgo_call(
    addr: std::net::SocketAddr,
    req: &[u8],
    timeout: Duration,
    cancel: Option<Duration>,
) -> serde_json::Value {
    let mut command = peer().expect("checked by the test");
    command
        .args(["client", &addr.to_string(), HOP_CALL_PATH])
        .arg(req.iter().map(|b| format!("{b:02x}")).collect::<String>())
        .arg(timeout.as_millis().to_string());
    if let Some(cancel) = cancel {
        command.arg(cancel.as_millis().to_string());
    }
    peer::client_answer("grpc-go", command.output().await)
}

#[tokio::test]
async fn grpcgo_client_deadline_is_read_refused_and_expired_as_deadline_exceeded() {
    if peer().is_none() {
        return;
    }
    peer::client_deadline_is_read_refused_and_expired("grpc-go", |addr, req, timeout| async move {
        grpcgo_call(addr, &req, timeout, None).await
    })
    .await;
}

#[tokio::test]
async fn grpcgo_server_sees_the_deadline_the_client_layer_stamps() {
    let Some(mut server) = peer() else { return };
    server.args(["server", HOP_CALL_PATH, "0"]);
    peer::server_sees_the_deadline_the_client_layer_stamps("grpc-go", server).await;
}

/// grpc-go's client ends the call itself, with RST_STREAM, when its context is cancelled: the
/// hop ends `cancelled` and the handler's work stops (C5). When the server's budget runs out
/// first (here its profile clamps the caller's 2 s to 250 ms), grpc-go gets the server's own
/// DEADLINE_EXCEEDED, marked `expired` in the trailers, long before its own timer would fire,
/// and the hop ends `expired` (C4).
///
/// At the caller's deadline itself the two race: the server's deadline is the caller's plus the
/// time the request took to reach the layer, so grpc-go's reset can arrive while the server's
/// budget still has a moment left, and the hop then ends `cancelled`, as C5 says of a caller that
/// aborts while budget remains (2 of 30 runs with both cores busy, none of 30 on a quiet machine).
/// No test asserts either outcome of that race.
#[tokio::test]
async fn a_grpcgo_client_that_cancels_ends_the_hop_cancelled_and_a_server_expiry_reaches_it() {
    if peer().is_none() {
        return;
    }
    let server = serve_profile(
        "interop",
        Profile::from_yaml("max_ms: 250\nedge_total_ms: 250\n", "interop.yaml").unwrap(),
    )
    .await;
    let work = call(&[], 5_000).encode_to_vec();

    let left = grpcgo_call(
        server.addr,
        &work,
        Duration::from_secs(2),
        Some(Duration::from_millis(100)),
    )
    .await;
    assert_eq!(left["code"], "CANCELLED", "{left}");
    assert!(
        server
            .stats
            .wait_for(Duration::from_secs(2), |s| s.live() == 0
                && s.work_stopped.lock().unwrap().len() == 1)
            .await,
        "the handler's work still runs after grpc-go cancelled the call"
    );
    assert_eq!(
        *server.stats.work_stopped.lock().unwrap(),
        [Some(EndCause::Cancelled)]
    );

    let started = std::time::Instant::now();
    let expired = grpcgo_call(server.addr, &work, Duration::from_secs(2), None).await;
    assert_eq!(expired["code"], "DEADLINE_EXCEEDED", "{expired}");
    assert_eq!(
        expired["trailers"]["x-deadline-outcome"], "expired",
        "not the server's own expiry: {expired}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(1_500),
        "the answer came at grpc-go's own deadline, not the server's"
    );
    assert!(
        server
            .stats
            .wait_for(Duration::from_secs(2), |s| s.live() == 0
                && s.work_stopped.lock().unwrap().len() == 2)
            .await,
        "the handler's work still runs after the deadline"
    );
    assert_eq!(
        server.stats.work_stopped.lock().unwrap()[1],
        Some(EndCause::Expired)
    );
}
