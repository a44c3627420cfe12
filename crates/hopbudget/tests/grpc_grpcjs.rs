//! Interop with a second gRPC implementation: @grpc/grpc-js (Node.js), as client and as
//! server, beside grpcio in `tests/grpc_grpcio.rs`. grpc-js writes and reads `grpc-timeout`
//! with code of its own (its own units and rounding), so it checks the codec and the status
//! mapping against a peer no one here wrote.
//!
//! Needs `node` (`HOPBUDGET_NODE`, default `node` on the `PATH`) and the `@grpc/grpc-js`
//! package in a `node_modules` directory (`HOPBUDGET_GRPCJS_NODE_PATH`, default
//! `target/grpcjs/node_modules` in the workspace). `.ci/run` installs it there; by hand:
//!
//! ```sh
//! npm install --prefix target/grpcjs @grpc/grpc-js
//! cargo test -p hopbudget --all-features --test grpc_grpcjs
//! ```
//!
//! Without them each test says so and passes, unless `HOPBUDGET_REQUIRE_SERVICES=1` (CI), where
//! it fails.
#![cfg(feature = "grpc")]

mod grpc_support;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use grpc_support::*;
use hopbudget::Profile;
use hopbudget_testkit::HOP_CALL_PATH;
use hopbudget_testkit::pb::CallReply;
use prost::Message;
use tokio::io::{AsyncBufReadExt, BufReader};

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
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop/grpcjs_peer.js"));
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
        .await
        .unwrap_or_else(|e| panic!("cannot run {} (set HOPBUDGET_NODE): {e}", node()));
    assert!(
        out.status.success(),
        "grpc-js client failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON line")
}

fn hex_decode(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

#[tokio::test]
async fn grpcjs_client_deadline_is_read_refused_and_expired_as_deadline_exceeded() {
    if !grpcjs_available() {
        return;
    }
    let server = serve_profile(
        "interop-js",
        Profile::from_yaml(
            &format!("routes:\n  - path: {HOP_CALL_PATH}\n    min_budget_ms: 200\n"),
            "interop.yaml",
        )
        .unwrap(),
    )
    .await;

    // 1. A 2 s grpc-js deadline arrives as grpc-timeout and becomes this hop's budget.
    let ok = grpcjs_call(
        server.addr,
        &call(&[], 0).encode_to_vec(),
        Duration::from_secs(2),
    )
    .await;
    assert_eq!(ok["code"], "OK", "{ok}");
    let reply =
        CallReply::decode(hex_decode(ok["reply_hex"].as_str().unwrap()).as_slice()).unwrap();
    assert_eq!(reply.source, ["grpc-timeout"], "{reply:?}");
    let seen = Duration::from_micros(reply.remaining_us[0]);
    assert!(
        seen <= Duration::from_secs(2) && seen > Duration::from_millis(1500),
        "grpc-js's 2 s deadline arrived as {seen:?} (raw header {:?})",
        reply.grpc_timeout
    );

    // 2. 100 ms against a route that needs 200 ms: refused before the handler, and grpc-js
    //    sees DEADLINE_EXCEEDED with the refusal and what it needed in the trailers.
    let before = server.stats.entered();
    let refused = grpcjs_call(
        server.addr,
        &call(&[], 0).encode_to_vec(),
        Duration::from_millis(100),
    )
    .await;
    assert_eq!(refused["code"], "DEADLINE_EXCEEDED", "{refused}");
    assert_eq!(
        refused["trailers"]["x-deadline-outcome"], "refused",
        "{refused}"
    );
    assert_eq!(
        refused["trailers"]["x-deadline-required-ms"], "200",
        "{refused}"
    );
    assert_eq!(server.stats.entered(), before, "the handler never ran");

    // 3. 300 ms with 5 s of work: expiry, which grpc-js sees as DEADLINE_EXCEEDED, and the
    //    handler's work stops.
    let expired = grpcjs_call(
        server.addr,
        &call(&[], 5_000).encode_to_vec(),
        Duration::from_millis(300),
    )
    .await;
    assert_eq!(expired["code"], "DEADLINE_EXCEEDED", "{expired}");
    assert!(
        server
            .stats
            .wait_for(Duration::from_secs(2), |s| s.live() == 0)
            .await,
        "the handler's work stopped"
    );
}

#[tokio::test]
async fn grpcjs_server_sees_the_deadline_the_client_layer_stamps() {
    if !grpcjs_available() {
        return;
    }
    let mut child = peer()
        .args(["server", HOP_CALL_PATH, "0"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", node()));
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let port: u16 = lines
        .next_line()
        .await
        .unwrap()
        .expect("the grpc-js server prints its port")
        .trim()
        .parse()
        .unwrap();
    let mut client = grpc_client(&Profile::default(), &format!("http://127.0.0.1:{port}"));

    // The budget is 400 ms; the layer forwards 400 - 5 - 1 ms, rounded down.
    let reply = budget(400)
        .scope(client.call(call(&[], 0)))
        .await
        .expect("grpc-js answers");
    let remaining: u64 = reply
        .metadata()
        .get("x-time-remaining-ms")
        .expect("trailer from grpc-js")
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        remaining <= 394 && remaining > 200,
        "grpc-js's call.getDeadline() left {remaining} ms"
    );
    drop(child);
}
