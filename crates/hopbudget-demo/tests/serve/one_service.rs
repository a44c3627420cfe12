//! `hopbudget-demo serve`: one service of the demo topology alone, in its own process, reached over
//! real sockets, with its behaviour from the topology file (min budget, latency, peers), and
//! what an operator needs: `--profile`, `/metrics`, a log line per hop, `--help` naming the
//! wire, and a clean stop on SIGTERM.
//!
//! One file on purpose, over 500 lines: every test here runs the same one-service process and
//! shares its start-up helpers.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hopbudget_demo::proto::HopRequest;
use hopbudget_demo::proto::hop_client::HopClient;

const TOPOLOGY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/topologies/checkout.yaml");

/// A `hopbudget-demo serve` child process, killed (by its own handle) when dropped; its stdout
/// lines are collected as they come.
struct Served {
    child: Child,
    addr: SocketAddr,
    metrics: SocketAddr,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Served {
    /// Wait (up to 5 s) for a stdout line containing every one of `parts`.
    fn line_with(&self, parts: &[&str]) -> String {
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(l) = self
                .lines
                .lock()
                .unwrap()
                .iter()
                .find(|l| parts.iter().all(|p| l.contains(p)))
            {
                return l.clone();
            }
            assert!(
                Instant::now() < until,
                "no line with {parts:?} in {:?}",
                self.lines.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(args: &[&str]) -> Served {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hopbudget-demo"))
        .arg("serve")
        .args(args)
        .args(["--topology", TOPOLOGY])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let errors = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    // "<name> (<protocol>, <mode> mode) listening on <addr>; metrics on http://<addr>/metrics; ..."
    let field = |after: &str, until: char| -> SocketAddr {
        line.split(after)
            .nth(1)
            .and_then(|rest| rest.split(until).next())
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .parse()
            .unwrap()
    };
    let (addr, metrics) = (
        field("listening on ", ';'),
        field("metrics on http://", '/'),
    );
    let lines = Arc::new(Mutex::new(vec![line.clone()]));
    // Stdout and stderr in one log, stderr's lines marked, in the order they came.
    for (stream, prefix) in [
        (Box::new(reader) as Box<dyn BufRead + Send>, ""),
        (Box::new(errors), "stderr: "),
    ] {
        let sink = lines.clone();
        std::thread::spawn(move || {
            for l in stream.lines() {
                let Ok(l) = l else { return };
                sink.lock().unwrap().push(format!("{prefix}{l}"));
            }
        });
    }
    Served {
        child,
        addr,
        metrics,
        lines,
    }
}

fn call(id: u64, timeout: &'static str) -> tonic::Request<HopRequest> {
    let mut req = tonic::Request::new(HopRequest { request_id: id });
    req.metadata_mut()
        .insert("grpc-timeout", timeout.parse().unwrap());
    req
}

/// A profile that makes reco-scorer refuse below its model's cost (180 ms) instead of taking
/// its cheaper path there: an operator's choice, and a refusal a test can reach with a budget
/// long enough for the round trip on a loaded machine.
fn strict_profile(name: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("serve-{name}-{}.yaml", std::process::id()));
    std::fs::write(
        &path,
        "service: reco-scorer\nroutes:\n  - path: /hopbudget.demo.Hop/Call\n    min_budget_ms: 180\n",
    )
    .unwrap();
    path
}

#[tokio::test]
async fn a_served_leaf_degrades_or_refuses_short_budgets_and_serves_long_ones() {
    // With the topology alone, 200 ms left is less than its model costs (240 ms): it takes
    // its cheaper path (3 ms) and answers, degraded (hopbudget::degrade). The budget leaves
    // room for a loaded CI machine: tonic's client gives up at the `grpc-timeout` it sends, and
    // with 100 ms a debug-build first call once arrived after it (Cancelled, "Timeout expired").
    let reco = serve(&["reco-scorer", "--port", "0"]);
    let mut client = HopClient::connect(format!("http://{}", reco.addr))
        .await
        .unwrap();
    let reply = client.call(call(3, "200m")).await.unwrap().into_inner();
    assert_eq!((reply.service.as_str(), reply.degraded), ("reco-scorer", 1));
    // 2 s left: it does its full work and answers.
    let reply = client.call(call(2, "2S")).await.unwrap().into_inner();
    assert_eq!((reply.service.as_str(), reply.degraded), ("reco-scorer", 0));

    // With a profile asking 180 ms: 150 ms left is refused before work (C3).
    let profile = strict_profile("strict-leaf");
    let reco = serve(&[
        "reco-scorer",
        "--port",
        "0",
        "--profile",
        profile.to_str().unwrap(),
    ]);
    let mut client = HopClient::connect(format!("http://{}", reco.addr))
        .await
        .unwrap();
    let status = client.call(call(1, "150m")).await.unwrap_err();
    let _ = std::fs::remove_file(&profile);
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    assert_eq!(
        hopbudget::grpc::outcome(&status),
        Some(hopbudget::Outcome::Refused),
        "{status:?}"
    );
    let refusal = hopbudget::grpc::refusal(&status).unwrap();
    assert_eq!(refusal.required(), Duration::from_millis(180));
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
    let out = Command::new(env!("CARGO_BIN_EXE_hopbudget-demo"))
        .args(["serve", "no-such-svc", "--topology", TOPOLOGY])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no service named `no-such-svc`"), "{err}");
    assert!(err.contains("reco-scorer"), "{err}");

    let out = Command::new(env!("CARGO_BIN_EXE_hopbudget-demo"))
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

#[tokio::test]
async fn an_operator_gets_metrics_a_log_line_per_hop_and_a_clean_sigterm_stop() {
    let profile = strict_profile("operator");
    let mut reco = serve(&[
        "reco-scorer",
        "--port",
        "0",
        "--profile",
        profile.to_str().unwrap(),
    ]);
    reco.line_with(&[
        "reads the budget from",
        "grpc-timeout",
        "x-request-timeout-ms",
    ]);
    let mut client = HopClient::connect(format!("http://{}", reco.addr))
        .await
        .unwrap();
    let status = client.call(call(1, "150m")).await.unwrap_err();
    let _ = std::fs::remove_file(&profile);
    assert_eq!(
        hopbudget::grpc::outcome(&status),
        Some(hopbudget::Outcome::Refused)
    );
    client.call(call(2, "2S")).await.unwrap();
    // Enough to start, less than its model costs (240 ms): the cheaper path, counted.
    assert_eq!(
        client
            .call(call(3, "210m"))
            .await
            .unwrap()
            .into_inner()
            .degraded,
        1
    );

    // One line per hop, from the library's hop span, refusals by the layer included.
    let refused = reco.line_with(&["hop service=reco-scorer", "outcome=refused"]);
    assert!(refused.contains("budget_ms=150"), "{refused}");
    assert!(refused.contains("required_ms=180"), "{refused}");
    assert!(refused.contains("source=grpc-timeout"), "{refused}");
    reco.line_with(&["hop service=reco-scorer", "outcome=completed"]);

    // Prometheus text on /metrics, with the library's metric names and buckets.
    let text = reqwest::get(format!("http://{}/metrics", reco.metrics))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("hopbudget_refused_before_work_total{service=\"reco-scorer\""),
        "{text}"
    );
    assert!(text.contains("outcome=\"completed\""), "{text}");
    assert!(
        text.contains(
            "hopbudget_degraded_total{service=\"reco-scorer\",route=\"/hopbudget.demo.Hop/Call\",path=\"precomputed\"} 1"
        ),
        "{text}"
    );
    assert!(
        text.contains("hopbudget_remaining_at_arrival_ms_bucket"),
        "{text}"
    );

    // SIGTERM: a clean stop, status 0, said on stdout.
    let pid = reco.child.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    let until = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = reco.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < until, "still running 10 s after SIGTERM");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status:?}");
    reco.line_with(&["reco-scorer: SIGTERM received, stopped"]);
}

/// C24: the operator edits the profile file and sends SIGHUP; the running process takes it
/// for the next call, refuses a file that does not validate (saying why, keeping what runs),
/// and the kill switch lets through what the threshold refused.
#[tokio::test]
async fn sighup_reloads_the_profile_and_keeps_the_running_one_when_the_new_one_is_bad() {
    let path = std::env::temp_dir().join(format!("serve-sighup-{}.yaml", std::process::id()));
    let strict = "service: reco-scorer\nroutes:\n  - path: /hopbudget.demo.Hop/Call\n    min_budget_ms: 2000\n";
    std::fs::write(&path, strict).unwrap();
    let reco = serve(&[
        "reco-scorer",
        "--port",
        "0",
        "--profile",
        path.to_str().unwrap(),
    ]);
    reco.line_with(&["SIGHUP reloads it"]);
    let mut client = HopClient::connect(format!("http://{}", reco.addr))
        .await
        .unwrap();
    let hangup = || {
        let pid = reco.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-HUP", &pid])
                .status()
                .unwrap()
                .success()
        );
    };

    // 1 s is less than the 2 s the route asks: refused before work (C3).
    let status = client.call(call(1, "1S")).await.unwrap_err();
    assert_eq!(
        hopbudget::grpc::refusal(&status).map(|r| r.required()),
        Some(Duration::from_millis(2000)),
        "{status:?}"
    );

    // The threshold was wrong: the operator turns enforcement off and says so.
    std::fs::write(&path, format!("{strict}enforce: false\n")).unwrap();
    hangup();
    reco.line_with(&["SIGHUP: profile", "reloaded; enforcement off"]);
    let reply = client.call(call(2, "1S")).await.unwrap().into_inner();
    assert_eq!(reply.service, "reco-scorer");

    // A typo in the next edit: refused with the file and the field, and what runs stays.
    std::fs::write(&path, format!("{strict}enforce: nope\n")).unwrap();
    hangup();
    let refused = reco.line_with(&["stderr: ", "profile reload refused"]);
    assert!(refused.contains(path.to_str().unwrap()), "{refused}");
    assert!(refused.contains("enforce"), "{refused}");
    let reply = client.call(call(3, "1S")).await.unwrap().into_inner();
    assert_eq!(reply.service, "reco-scorer", "enforcement is still off");

    // Back on.
    std::fs::write(&path, strict).unwrap();
    hangup();
    reco.line_with(&["SIGHUP: profile", "reloaded; enforcement on"]);
    let status = client.call(call(4, "1S")).await.unwrap_err();
    let _ = std::fs::remove_file(&path);
    assert!(hopbudget::grpc::refusal(&status).is_some(), "{status:?}");
}

#[tokio::test]
async fn a_profile_file_sets_the_layers_rules() {
    // The operator's profile asks 1 s for the gRPC method: a 500 ms call is refused with that
    // requirement, where the topology alone (10 ms) would have let it start.
    let path = std::env::temp_dir().join(format!("serve-profile-{}.yaml", std::process::id()));
    std::fs::write(
        &path,
        "service: reco-scorer\nroutes:\n  - path: /hopbudget.demo.Hop/Call\n    min_budget_ms: 1000\n",
    )
    .unwrap();
    let reco = serve(&[
        "reco-scorer",
        "--port",
        "0",
        "--profile",
        path.to_str().unwrap(),
    ]);
    let mut client = HopClient::connect(format!("http://{}", reco.addr))
        .await
        .unwrap();
    let status = client.call(call(1, "500m")).await.unwrap_err();
    let _ = std::fs::remove_file(&path);
    let refusal = hopbudget::grpc::refusal(&status).unwrap();
    assert_eq!(
        refusal.required(),
        Duration::from_millis(1000),
        "{status:?}"
    );
}

#[test]
fn a_bad_profile_is_named_with_file_field_and_reason() {
    let path = std::env::temp_dir().join(format!("serve-bad-profile-{}.yaml", std::process::id()));
    std::fs::write(&path, "hop_margin_ms: -3\n").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_hopbudget-demo"))
        .args([
            "serve",
            "reco-scorer",
            "--port",
            "0",
            "--topology",
            TOPOLOGY,
        ])
        .args(["--profile", path.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // It must refuse to start; a server that started anyway is killed, and the test fails.
    let until = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(path.to_str().unwrap()), "{err}");
    assert!(err.contains("hop_margin_ms"), "{err}");
}

#[test]
fn serve_help_names_the_wire() {
    let out = Command::new(env!("CARGO_BIN_EXE_hopbudget-demo"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for needed in [
        "POST /call",
        "x-demo-request-id",
        "/hopbudget.demo.Hop/Call",
        "grpc-timeout",
        "x-request-timeout-ms",
        "/metrics",
        "SIGTERM",
        "--profile",
    ] {
        assert!(help.contains(needed), "`{needed}` missing from:\n{help}");
    }
}

/// `name=value` pairs of a text hop line (`hop service=... took_ms=...`).
fn text_fields(line: &str) -> Vec<(String, String)> {
    line.strip_prefix("hop ")
        .unwrap_or_else(|| panic!("not a hop line: {line}"))
        .split(' ')
        .map(|pair| {
            let (name, value) = pair
                .split_once('=')
                .unwrap_or_else(|| panic!("{pair:?} in {line}"));
            (name.to_owned(), value.to_owned())
        })
        .collect()
}

/// The fields of a JSON hop line, `message` left out, values as text.
fn json_fields(line: &str) -> Vec<(String, String)> {
    let object: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    assert_eq!(object["message"], "hop", "{line}");
    object
        .as_object()
        .unwrap()
        .iter()
        .filter(|(key, _)| *key != "message")
        .map(|(key, value)| {
            let value = match value {
                serde_json::Value::String(s) => s.clone(),
                // The text line's `none`.
                serde_json::Value::Null => "none".to_owned(),
                other => other.to_string(),
            };
            (key.clone(), value)
        })
        .collect()
}

/// `--log-format json` (issue #50 item 9): the hop lines as one JSON object each, with the
/// fields of the text lines, in both places a line comes from: the library's hop span
/// (`propagated`, a refusal and an answer) and the demo's own collector (`timeouts`, no server
/// layer). Numbers stay numbers; a budget the mode does not read is null (`none` in text).
#[tokio::test]
async fn the_hop_lines_have_the_same_fields_as_json() {
    for mode in ["propagated", "timeouts"] {
        let mut lines = Vec::new();
        for format in ["text", "json"] {
            let profile = strict_profile(&format!("log-{mode}-{format}"));
            let served = serve(&[
                "reco-scorer",
                "--port",
                "0",
                "--mode",
                mode,
                "--log-format",
                format,
                "--profile",
                profile.to_str().unwrap(),
            ]);
            let mut client = HopClient::connect(format!("http://{}", served.addr))
                .await
                .unwrap();
            client.call(call(2, "2S")).await.unwrap();
            let answered = if format == "text" {
                served.line_with(&["hop service=reco-scorer", "outcome=completed"])
            } else {
                served.line_with(&["{\"message\":\"hop\"", "\"outcome\":\"completed\""])
            };
            let mut found = vec![answered];
            if mode == "propagated" {
                let _ = client.call(call(1, "150m")).await.unwrap_err();
                found.push(if format == "text" {
                    served.line_with(&["hop service=reco-scorer", "outcome=refused"])
                } else {
                    served.line_with(&["{\"message\":\"hop\"", "\"outcome\":\"refused\""])
                });
            }
            let _ = std::fs::remove_file(&profile);
            lines.push(found);
        }
        let (text, json) = (&lines[0], &lines[1]);
        for (text, json) in text.iter().zip(json) {
            // By name: a JSON object's keys have no order.
            let (mut t, mut j) = (text_fields(text), json_fields(json));
            t.sort();
            j.sort();
            let names = |fields: &[(String, String)]| -> Vec<String> {
                fields.iter().map(|(name, _)| name.clone()).collect()
            };
            assert_eq!(names(&t), names(&j), "{mode}\ntext: {text}\njson: {json}");
            assert!(t.len() >= 5, "{text}");
            // Everything but the timing is the same.
            for ((name, tv), (_, jv)) in t.iter().zip(&j) {
                if name != "took_ms" {
                    assert_eq!(tv, jv, "{mode} {name}\ntext: {text}\njson: {json}");
                }
            }
            let object: serde_json::Value = serde_json::from_str(json).unwrap();
            // A mode without the layers reads no budget: `none` in text, null here.
            let read = mode == "propagated";
            assert!(
                object["budget_ms"].is_u64() == read && object["budget_ms"].is_null() != read,
                "{json}"
            );
            assert!(object["took_ms"].is_f64(), "{json}");
        }
    }
}
