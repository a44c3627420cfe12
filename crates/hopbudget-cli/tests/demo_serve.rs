//! `hopbudget serve`: one service of the demo topology alone, in its own process, reached over
//! real sockets, with its behaviour from the topology file (min budget, latency, peers).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use hopbudget_cli::proto::HopRequest;
use hopbudget_cli::proto::hop_client::HopClient;

const TOPOLOGY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/topologies/checkout.yaml");

/// A `hopbudget serve` child process, killed (by its own handle) when dropped.
struct Served {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(args: &[&str]) -> Served {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hopbudget"))
        .arg("serve")
        .args(args)
        .args(["--topology", TOPOLOGY])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    // "<name> (<protocol>, <mode> mode) listening on <addr>; Ctrl-C stops it"
    let addr = line
        .split("listening on ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .parse()
        .unwrap();
    Served { child, addr }
}

fn call(id: u64, timeout: &'static str) -> tonic::Request<HopRequest> {
    let mut req = tonic::Request::new(HopRequest { request_id: id });
    req.metadata_mut()
        .insert("grpc-timeout", timeout.parse().unwrap());
    req
}

#[tokio::test]
async fn a_served_leaf_refuses_short_budgets_and_serves_long_ones() {
    let reco = serve(&["reco-scorer", "--port", "0"]);
    let mut client = HopClient::connect(format!("http://{}", reco.addr))
        .await
        .unwrap();

    // 100 ms left, reco-scorer needs 180 ms (its stale-model path): refused before work (C3).
    let status = client.call(call(1, "100m")).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    assert_eq!(
        hopbudget::grpc::outcome(&status),
        Some(hopbudget::Outcome::Refused),
        "{status:?}"
    );
    let refusal = hopbudget::grpc::refusal(&status).unwrap();
    assert_eq!(refusal.required(), Duration::from_millis(180));

    // 2 s left: it does its work and answers.
    let reply = client.call(call(2, "2S")).await.unwrap().into_inner();
    assert_eq!(reply.service, "reco-scorer");
}

#[tokio::test]
async fn two_processes_form_the_vendor_hop() {
    // reco-scorer in one process, warehouse-router (HTTP) in another, pointed at it.
    let reco = serve(&["reco-scorer", "--port", "0"]);
    let peer = format!("reco-scorer={}", reco.addr);
    let warehouse = serve(&["warehouse-router", "--port", "0", "--peer", &peer]);
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let url = format!("http://{}/call", warehouse.addr);

    // Enough budget for both: reco-scorer answers, nothing is degraded.
    let res = client
        .post(&url)
        .header("x-demo-request-id", "7")
        .header("x-request-timeout-ms", "3000")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let body: serde_json::Value = res.json().await.unwrap();
    assert_eq!(body["service"], "warehouse-router");
    assert_eq!(body["degraded"], 0, "{body}");

    // Too little for warehouse-router itself (min 60 ms): 503 with Retry-After: 0 (C3).
    let res = client
        .post(&url)
        .header("x-demo-request-id", "8")
        .header("x-request-timeout-ms", "30")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers()["retry-after"], "0");
}

#[test]
fn serve_names_what_is_missing() {
    let out = Command::new(env!("CARGO_BIN_EXE_hopbudget"))
        .args(["serve", "no-such-svc", "--topology", TOPOLOGY])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no service named `no-such-svc`"), "{err}");
    assert!(err.contains("reco-scorer"), "{err}");

    let out = Command::new(env!("CARGO_BIN_EXE_hopbudget"))
        .args([
            "serve",
            "warehouse-router",
            "--port",
            "0",
            "--peer",
            "reco-scorer",
        ])
        .args(["--topology", TOPOLOGY])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("expected NAME=ADDR"), "{err}");
}
