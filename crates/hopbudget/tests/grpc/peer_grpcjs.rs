//! Interop with a second gRPC implementation: @grpc/grpc-js (Node.js), as client and as
//! server, beside grpcio in `tests/grpc/peer_grpcio.rs`. grpc-js writes and reads `grpc-timeout`
//! with code of its own (its own units and rounding), so it checks the codec and the status
//! mapping against a peer no one here wrote.
//!
//! Needs `node` (`HOPBUDGET_NODE`, default `node` on the `PATH`) and the `@grpc/grpc-js`
//! package in a `node_modules` directory (`HOPBUDGET_GRPCJS_NODE_PATH`, default
//! `target/grpcjs/node_modules` in the workspace). `.ci/run` installs it there; by hand:
//!
//! ```sh
//! npm install --prefix target/grpcjs @grpc/grpc-js
//! cargo test -p hopbudget --all-features --test grpc peer_grpcjs
//! ```
//!
//! Without them each test says so and passes, unless `HOPBUDGET_REQUIRE_SERVICES=1` (CI), where
//! it fails.
#![cfg(feature = "grpc")]

use std::path::PathBuf;
use std::time::Duration;

use crate::grpc_support::*;
use hopbudget_testkit::HOP_CALL_PATH;

fn node() -> String {
    std::env::var("HOPBUDGET_NODE").unwrap_or_else(|_| "node".into())
}

/// The `node_modules` directory that holds `@grpc/grpc-js`.
fn node_path() -> PathBuf {
    match std::env::var_os("HOPBUDGET_GRPCJS_NODE_PATH") {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/grpcjs/node_modules"),
    }
}

fn peer() -> tokio::process::Command {
    let mut command = tokio::process::Command::new(node());
    command
        .env("NODE_PATH", node_path())
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../interop/grpcjs_peer.js"));
    command
}

/// Whether node can load grpc-js; without it the test is skipped, or fails when
/// `HOPBUDGET_REQUIRE_SERVICES=1`.
fn grpcjs_available() -> bool {
    let found = std::process::Command::new(node())
        .env("NODE_PATH", node_path())
        .args(["-e", "require('@grpc/grpc-js')"])
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return true;
    }
    let message = format!(
        "no @grpc/grpc-js for `{}` in {}: npm install --prefix target/grpcjs @grpc/grpc-js \
         (or set HOPBUDGET_NODE / HOPBUDGET_GRPCJS_NODE_PATH)",
        node(),
        node_path().display()
    );
    assert!(
        std::env::var("HOPBUDGET_REQUIRE_SERVICES").as_deref() != Ok("1"),
        "{message}"
    );
    eprintln!("skipped: {message}");
    false
}

/// Run the grpc-js client once; its JSON answer.
async fn grpcjs_call(
    addr: std::net::SocketAddr,
    req: &[u8],
    timeout: Duration,
) -> serde_json::Value {
    let out = peer()
        .args(["client", &addr.to_string(), HOP_CALL_PATH])
        .arg(req.iter().map(|b| format!("{b:02x}")).collect::<String>())
        .arg(timeout.as_millis().to_string())
        .output()
        .await;
    peer::client_answer("grpc-js (set HOPBUDGET_NODE)", out)
}

#[tokio::test]
async fn grpcjs_client_deadline_is_read_refused_and_expired_as_deadline_exceeded() {
    if !grpcjs_available() {
        return;
    }
    peer::client_deadline_is_read_refused_and_expired("grpc-js", |addr, req, timeout| async move {
        grpcjs_call(addr, &req, timeout).await
    })
    .await;
}

#[tokio::test]
async fn grpcjs_server_sees_the_deadline_the_client_layer_stamps() {
    if !grpcjs_available() {
        return;
    }
    let mut server = peer();
    server.args(["server", HOP_CALL_PATH, "0"]);
    peer::server_sees_the_deadline_the_client_layer_stamps("grpc-js", server).await;
}
