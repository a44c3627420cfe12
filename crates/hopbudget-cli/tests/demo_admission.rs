//! In propagated mode a leaf service runs hopbudget's admission layer (C21, S17): its slots
//! are the topology's `concurrency`, and the requests waiting for one are served
//! earliest-deadline-first, not first come first served. Checked on `hopbudget serve`, over a
//! real socket, with a leaf of one slot.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_propagated_leaf_serves_its_waiters_earliest_deadline_first() {
    let file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("demo-admission.yaml");
    std::fs::write(&file, TOPOLOGY).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_hopbudget"))
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
    let _served = Served(child);
    let addr = line
        .split("listening on ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .to_owned();
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
