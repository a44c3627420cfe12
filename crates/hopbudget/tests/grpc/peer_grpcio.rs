//! Interop with a standard gRPC implementation: grpcio (Python) as client and as server.
//!
//! Needs a Python with `grpcio`. `.ci/run` makes one in `target/pyvenv` and points
//! `HOPBUDGET_GRPCIO_PYTHON` at it; by hand:
//!
//! ```sh
//! python3 -m venv target/pyvenv && target/pyvenv/bin/pip install grpcio grpcio-tools
//! HOPBUDGET_GRPCIO_PYTHON=target/pyvenv/bin/python \
//!     cargo test -p hopbudget --all-features --test grpc peer_grpcio
//! ```
//!
//! Without such a Python (the README's test command on a fresh machine installs none) each test
//! says so and passes, unless `HOPBUDGET_REQUIRE_SERVICES=1` (CI), where it fails.
//!
//! It checks that grpcio's own `grpc-timeout` is read by `GrpcServerLayer` (budget and source),
//! that a refusal and an expiry reach grpcio as DEADLINE_EXCEEDED (never CANCELLED), and that
//! grpcio's server sees the deadline `GrpcClientLayer` stamps.
#![cfg(feature = "grpc")]

use std::path::PathBuf;
use std::time::Duration;

use crate::grpc_support::*;
use hopbudget_testkit::HOP_CALL_PATH;

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
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../interop/grpcio_peer.py")
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
        .await;
    peer::client_answer("grpcio (set HOPBUDGET_GRPCIO_PYTHON)", out)
}

#[tokio::test]
async fn grpcio_client_deadline_is_read_refused_and_expired_as_deadline_exceeded() {
    if !grpcio_available() {
        return;
    }
    peer::client_deadline_is_read_refused_and_expired("grpcio", |addr, req, timeout| async move {
        grpcio_call(addr, &req, timeout).await
    })
    .await;
}

#[tokio::test]
async fn grpcio_server_sees_the_deadline_the_client_layer_stamps() {
    if !grpcio_available() {
        return;
    }
    let mut server = tokio::process::Command::new(python());
    server.arg(peer_script()).args(["server", "0"]);
    peer::server_sees_the_deadline_the_client_layer_stamps("grpcio", server).await;
}
