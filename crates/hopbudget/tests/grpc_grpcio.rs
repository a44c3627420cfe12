//! Interop with a standard gRPC implementation: grpcio (Python) as client and as server.
//!
//! Needs a Python with `grpcio`. `.ci/run` makes one in `target/pyvenv` and points
//! `HOPBUDGET_GRPCIO_PYTHON` at it; by hand:
//!
//! ```sh
//! python3 -m venv target/pyvenv && target/pyvenv/bin/pip install grpcio grpcio-tools
//! HOPBUDGET_GRPCIO_PYTHON=target/pyvenv/bin/python \
//!     cargo test -p hopbudget --all-features --test grpc_grpcio
//! ```
//!
//! Without such a Python (the README's test command on a fresh machine installs none) each test
//! says so and passes, unless `HOPBUDGET_REQUIRE_SERVICES=1` (CI), where it fails.
//!
//! It checks that grpcio's own `grpc-timeout` is read by `GrpcServerLayer` (budget and source),
//! that a refusal and an expiry reach grpcio as DEADLINE_EXCEEDED (never CANCELLED), and that
//! grpcio's server sees the deadline `GrpcClientLayer` stamps.
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

fn python() -> String {
    std::env::var("HOPBUDGET_GRPCIO_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Whether the Python at hand can `import grpc`; without it the test is skipped, or fails when
/// `HOPBUDGET_REQUIRE_SERVICES=1`.
fn grpcio_available() -> bool {
    let found = std::process::Command::new(python())
        .args(["-c", "import grpc"])
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return true;
    }
    let message = format!(
        "no grpcio for `{}`: python3 -m venv target/pyvenv && target/pyvenv/bin/pip install \
         grpcio grpcio-tools, then set HOPBUDGET_GRPCIO_PYTHON=target/pyvenv/bin/python",
        python()
    );
    assert!(
        std::env::var("HOPBUDGET_REQUIRE_SERVICES").as_deref() != Ok("1"),
        "{message}"
    );
    eprintln!("skipped: {message}");
    false
}

fn peer_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop/grpcio_peer.py")
}

/// Run the grpcio client once; its JSON answer.
async fn grpcio_call(
    addr: std::net::SocketAddr,
    req: &[u8],
    timeout: Duration,
) -> serde_json::Value {
    let out = tokio::process::Command::new(python())
        .arg(peer_script())
        .args(["client", &addr.to_string(), HOP_CALL_PATH])
        .arg(req.iter().map(|b| format!("{b:02x}")).collect::<String>())
        .arg(timeout.as_secs_f64().to_string())
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run {} (set HOPBUDGET_GRPCIO_PYTHON): {e}", python()));
    assert!(
        out.status.success(),
        "grpcio client failed (is grpcio installed? `pip install grpcio`):\n{}",
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
async fn grpcio_client_deadline_is_read_refused_and_expired_as_deadline_exceeded() {
    if !grpcio_available() {
        return;
    }
    let server = serve_profile(
        "interop",
        Profile::from_yaml(
            &format!("routes:\n  - path: {HOP_CALL_PATH}\n    min_budget_ms: 200\n"),
            "interop.yaml",
        )
        .unwrap(),
    )
    .await;

    // 1. A 2 s grpcio deadline arrives as grpc-timeout and becomes this hop's budget.
    let ok = grpcio_call(
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
        "grpcio's 2 s deadline arrived as {seen:?} (raw header {:?})",
        reply.grpc_timeout
    );

    // 2. 100 ms against a route that needs 200 ms: refused before the handler, and grpcio sees
    //    DEADLINE_EXCEEDED with the refusal marked in the trailers.
    let before = server.stats.entered();
    let refused = grpcio_call(
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
    assert_eq!(server.stats.entered(), before, "the handler never ran");

    // 3. 300 ms with 5 s of work: expiry, which grpcio sees as DEADLINE_EXCEEDED, and the
    //    handler's work stops.
    let expired = grpcio_call(
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
async fn grpcio_server_sees_the_deadline_the_client_layer_stamps() {
    if !grpcio_available() {
        return;
    }
    let mut child = tokio::process::Command::new(python())
        .arg(peer_script())
        .args(["server", "0"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python()));
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let port: u16 = lines
        .next_line()
        .await
        .unwrap()
        .expect("the grpcio server prints its port")
        .trim()
        .parse()
        .unwrap();
    let mut client = grpc_client(&Profile::default(), &format!("http://127.0.0.1:{port}"));

    // The budget is 400 ms; the layer forwards 400 - 5 - 1 ms, rounded down.
    let reply = budget(400)
        .scope(client.call(call(&[], 0)))
        .await
        .expect("grpcio answers");
    let remaining: u64 = reply
        .metadata()
        .get("x-time-remaining-ms")
        .expect("trailer from grpcio")
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        remaining <= 394 && remaining > 200,
        "grpcio's context.time_remaining() was {remaining} ms"
    );
    drop(child);
}
