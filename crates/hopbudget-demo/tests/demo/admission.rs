//! In propagated mode a leaf service runs hopbudget's admission layer (C21, S17): its slots
//! are the topology's `concurrency`, and the requests waiting for one are served
//! earliest-deadline-first, not first come first served, and a request whose budget cannot
//! cover the work's p99 is refused (marked, with the budget it needed). Checked on
//! `hopbudget-demo serve`, over a real socket, with a leaf of one slot.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::serial::one_demo_at_a_time_async;
use hopbudget_demo::proto::HopRequest;
use hopbudget_demo::proto::hop_client::HopClient;

/// One HTTP leaf, one slot, exactly 300 ms of work per request.
const TOPOLOGY: &str =
    "client: {budget_ms: 5000, timeout_ms: 6000, rate_per_s: 1, duration_s: 1, seed: 1}
services:
  - name: one-slot
    protocol: http
    latency: {p50_ms: 300, p99_ms: 300}
    concurrency: 1
    timeout_ms: 5000
    min_budget_ms: 50
";

struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start `hopbudget-demo serve` on the one service of `topology`; its address.
fn serve(name: &str, topology: &str) -> (Served, String) {
    let file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.yaml"));
    std::fs::write(&file, topology).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_hopbudget-demo"))
        .args(["serve", "one-slot", "--port", "0", "--mode", "propagated"])
        .arg("--topology")
        .arg(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    stdout.read_line(&mut line).unwrap();
    // Keep reading its log lines (one per hop), or it would write into a closed pipe.
    std::thread::spawn(move || for _ in stdout.lines() {});
    let addr = line
        .split("listening on ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .to_owned();
    (Served(child), addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_propagated_leaf_serves_its_waiters_earliest_deadline_first() {
    let _demo = one_demo_at_a_time_async().await;
    let (_served, addr) = serve("demo-admission-http", TOPOLOGY);
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let call = |id: u64, budget_ms: u64| {
        let req = client
            .post(format!("http://{addr}/call"))
            .header("x-demo-request-id", id)
            .header("x-request-timeout-ms", budget_ms);
        tokio::spawn(async move {
            let status = req.send().await.map(|r| r.status().as_u16());
            (status, tokio::time::Instant::now())
        })
    };
    // The first request takes the only slot for 300 ms.
    let first = call(1, 5_000);
    tokio::time::sleep(Duration::from_millis(80)).await;
    // Then two wait for it: `late` first with the later deadline, `early` after it with the
    // earlier one. Both have budget for the wait and the work, whichever order they run in.
    let late = call(2, 5_000);
    tokio::time::sleep(Duration::from_millis(80)).await;
    let early = call(3, 3_000);
    let (first, late, early) = (
        first.await.unwrap(),
        late.await.unwrap(),
        early.await.unwrap(),
    );
    for (name, (status, _)) in [("first", &first), ("late", &late), ("early", &early)] {
        assert_eq!(status.as_ref().ok(), Some(&200), "{name}: {status:?}");
    }
    // Earliest deadline first: the one that arrived second but must finish sooner got the
    // slot first (first come first served would have answered `late` first).
    assert!(
        early.1 < late.1,
        "the earlier deadline was served after the later one"
    );
}

#[tokio::test]
async fn a_grpc_leaf_refuses_below_its_work_p99_with_a_marked_status() {
    let _demo = one_demo_at_a_time_async().await;
    // The same leaf over gRPC. Its admission cost is its work's p99 (300 ms), above the
    // server layer's minimum (50 ms): a call with 200 ms passes the server layer and is
    // refused by admission at once, spelled like the gRPC server layer's refusals.
    let (_served, addr) = serve(
        "demo-admission-grpc",
        &TOPOLOGY.replace("protocol: http", "protocol: grpc"),
    );
    let mut client = HopClient::connect(format!("http://{addr}")).await.unwrap();
    let mut req = tonic::Request::new(HopRequest { request_id: 1 });
    req.metadata_mut()
        .insert("grpc-timeout", "200m".parse().unwrap());
    let status = client.call(req).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    assert_eq!(
        hopbudget::grpc::outcome(&status),
        Some(hopbudget::Outcome::Refused),
        "{status:?}"
    );
    let refusal = hopbudget::grpc::refusal(&status).unwrap();
    assert_eq!(refusal.required(), Duration::from_millis(300), "{status:?}");
}
