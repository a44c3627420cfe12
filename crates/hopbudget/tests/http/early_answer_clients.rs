//! S14 with clients that are not Rust: each sends its headers, then its body a moment later, as
//! an upload streamed from a slow source is sent. The server layer answers before the body was
//! read, and the client must receive that answer every time, not a broken pipe or a reset
//! (C18), on fresh and on kept-alive connections, for bodies up to the 1 MiB the layer drains:
//!
//! - Node.js's `http` module: the 503 refusal (the route needs 200 ms, the client has 120 ms);
//! - Node.js's `http2` module, over HTTP/2: the 503 and the 504, kept although the server resets
//!   the stream after answering, and the session carrying the next request;
//! - Go's `net/http`: the same refusal, with `Content-Length` and chunked bodies, and the 504 of
//!   an expiry that came while the handler was still waiting for the body (50 ms budget, the
//!   body 100 ms late, or trickling in);
//! - Python's standard `http.client` and `requests` (urllib3): the same cases as Go.
//!
//! Needs `node` (set `HOPBUDGET_NODE` to its path; default `node` on the `PATH`), Go
//! (`apt-get install golang-go`; see `go_support`) and a Python with `requests` (set
//! `HOPBUDGET_PYTHON`; default `python3`; `.ci/run` installs it into `target/pyvenv`). Without
//! one, its test says so and passes, unless `HOPBUDGET_REQUIRE_SERVICES=1` (CI), where it fails.
#![cfg(feature = "axum")]

use std::path::PathBuf;

use axum::Router;
use axum::body::Bytes;
use axum::routing::post;
use hopbudget::http::server::ServerBudgetLayer;

/// The program named by the environment variable `var` (default `default`), if running it
/// with `check` succeeds. Otherwise the test is skipped with `missing`'s advice, or fails under
/// `HOPBUDGET_REQUIRE_SERVICES=1` (CI).
fn peer_program(
    var: &str,
    default: &str,
    check: &[&str],
    missing: impl FnOnce(&str) -> String,
) -> Option<String> {
    let program = std::env::var(var).unwrap_or_else(|_| default.into());
    let found = std::process::Command::new(&program)
        .args(check)
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some(program);
    }
    let message = missing(&program);
    assert!(
        std::env::var("HOPBUDGET_REQUIRE_SERVICES").as_deref() != Ok("1"),
        "{message}"
    );
    eprintln!("skipped: {message}");
    None
}

fn node() -> Option<String> {
    peer_program("HOPBUDGET_NODE", "node", &["--version"], |node| {
        format!(
            "Node.js not found as `{node}`: install node (the machines carry node 20) or set \
             HOPBUDGET_NODE to its path"
        )
    })
}

/// The Python to run the Python clients with (`HOPBUDGET_PYTHON`, default `python3`), if it
/// can import `requests`.
fn python_with_requests() -> Option<String> {
    peer_program(
        "HOPBUDGET_PYTHON",
        "python3",
        &["-c", "import requests"],
        |python| {
            format!(
                "no Python with `requests` as `{python}`: `python3 -m venv target/pyvenv && \
             target/pyvenv/bin/pip install requests`, then set \
             HOPBUDGET_PYTHON=target/pyvenv/bin/python"
            )
        },
    )
}

/// A client script of this test's, under the workspace's `interop/`.
fn interop_script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../interop")
        .join(name)
}

/// A server with `/tax`, which needs 200 ms (refused below), and `/upload`, which has no rule;
/// both handlers read the whole body. Returns its base URL.
async fn serve() -> String {
    let p =
        crate::http_support::profile("service: tax\nroutes: [{path: /tax, min_budget_ms: 200}]");
    let echo_length = || post(|body: Bytes| async move { format!("{}", body.len()) });
    crate::http_support::serve(
        Router::new()
            .route("/tax", echo_length())
            .route("/upload", echo_length())
            .layer(ServerBudgetLayer::new(p)),
    )
    .await
}

/// The client's tally, which must be `rounds` answers of `status` and no error.
fn assert_every_round_answered(out: &std::process::Output, status: &str, rounds: u32, case: &str) {
    assert!(
        out.status.success(),
        "the client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tally: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    assert_eq!(
        tally,
        serde_json::json!({"status": {status: rounds}, "error": {}}),
        "{case}: every round must see the {status}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s14_node_http_client_writing_its_body_late_receives_the_503() {
    let Some(node) = node() else {
        return;
    };
    let url = serve().await;
    let script = interop_script("node_early_refusal.js");
    for (body_bytes, agent) in [
        ("16", "fresh"),
        ("262144", "fresh"),
        ("16", "keep-alive"),
        // The layer drains at most 1 MiB of an unread body before it closes (C18); a larger
        // body may still see the close as a reset, by design.
        ("524288", "keep-alive"),
    ] {
        let out = tokio::process::Command::new(&node)
            .arg(&script)
            .args([&format!("{url}/tax"), "120", body_bytes, "40", agent])
            .output()
            .await
            .expect("node runs");
        assert_every_round_answered(
            &out,
            "503",
            40,
            &format!("node, a {body_bytes}-byte body sent after the headers ({agent})"),
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c18_node_http2_client_keeps_the_early_answer_and_its_session() {
    let Some(node) = node() else {
        return;
    };
    let url = serve().await;
    let script = interop_script("node_h2_early_answer.js");
    // path, budget ms, expected status, body bytes, ms from the headers to the body. Bodies
    // within the stream's flow-control window (hyper's default, 1 MiB): with a larger one,
    // still waiting to send when the reset comes, Node's client sometimes ends the stream
    // without emitting the answer it received (with 2 MiB on a busy machine, 0 to 11 rounds of
    // 20 from the layer and 0 or 1 from axum without the layer; with 4 MiB, half or more from
    // both). Go's http2 client and nghttp keep every answer.
    for case in [
        "/tax 120 503 16 20",
        "/tax 120 503 524288 0",
        "/upload 50 504 16 100",
        "/upload 50 504 524288 100",
    ] {
        let fields: Vec<&str> = case.split(' ').collect();
        let [path, budget_ms, status, body_bytes, delay_ms] = fields[..] else {
            panic!("a case has five fields: {case}");
        };
        let out = tokio::process::Command::new(&node)
            .arg(&script)
            .args([&url, path, budget_ms, body_bytes, delay_ms])
            .arg(ROUNDS.to_string())
            .output()
            .await
            .expect("node runs");
        assert_every_round_answered(
            &out,
            status,
            ROUNDS,
            &format!(
                "node http2, {path} with {budget_ms} ms, a {body_bytes}-byte body {delay_ms} ms \
                 after the headers, {ROUNDS} rounds on one session"
            ),
        );
    }
}

/// Rounds of each case for the Node `http2`, Go and Python clients: every one must see the
/// answer.
const ROUNDS: u32 = 20;

/// The early answers each client must receive: path, budget ms, expected status, body bytes,
/// connections, framing, ms between pieces, pieces.
const CASES: [&str; 12] = [
    // Refused before the handler ran: the body is not read at all.
    "/tax 120 503 16 fresh length 20 1",
    "/tax 120 503 16 keep-alive length 20 1",
    "/tax 120 503 524288 keep-alive length 20 1",
    "/tax 120 503 16 keep-alive chunked 20 1",
    "/tax 120 503 524288 fresh chunked 20 1",
    // The body right behind the headers: it reaches the server while the answer is
    // written, and unread it would turn the close into a reset.
    "/tax 120 503 524288 fresh length 0 1",
    "/tax 120 503 524288 keep-alive chunked 0 1",
    // Expired while the handler waited for a body that came 100 ms late.
    "/upload 50 504 16 fresh length 100 1",
    "/upload 50 504 524288 keep-alive length 100 1",
    "/upload 50 504 16 keep-alive chunked 100 1",
    // Expired while the body still trickled in (20 pieces, 10 ms apart).
    "/upload 50 504 524288 fresh length 10 20",
    "/upload 50 504 524288 keep-alive chunked 10 20",
];

/// One of [`CASES`], read.
struct Case<'a> {
    path: &'a str,
    budget_ms: &'a str,
    status: &'a str,
    body_bytes: &'a str,
    agent: &'a str,
    framing: &'a str,
    delay_ms: &'a str,
    pieces: &'a str,
}

impl<'a> Case<'a> {
    fn parse(case: &'a str) -> Self {
        let mut fields = case.split(' ');
        let mut next = || {
            fields
                .next()
                .unwrap_or_else(|| panic!("a case has eight fields: {case}"))
        };
        let read = Case {
            path: next(),
            budget_ms: next(),
            status: next(),
            body_bytes: next(),
            agent: next(),
            framing: next(),
            delay_ms: next(),
            pieces: next(),
        };
        assert!(fields.next().is_none(), "a case has eight fields: {case}");
        read
    }

    /// The arguments the Go and Python clients both take (the Python one after its CLIENT):
    /// `URL TIMEOUT_MS BODY_BYTES ROUNDS AGENT FRAMING DELAY_MS PIECES`, with [`ROUNDS`] rounds.
    fn client_args(&self, base_url: &str) -> [String; 8] {
        [
            format!("{base_url}{}", self.path),
            self.budget_ms.into(),
            self.body_bytes.into(),
            ROUNDS.to_string(),
            self.agent.into(),
            self.framing.into(),
            self.delay_ms.into(),
            self.pieces.into(),
        ]
    }

    /// Every round of `out`, the client's tally, must have seen this case's answer.
    fn assert_answered(&self, client: &str, out: &std::process::Output) {
        let Case {
            path,
            budget_ms,
            body_bytes,
            framing,
            pieces,
            delay_ms,
            agent,
            ..
        } = self;
        assert_every_round_answered(
            out,
            self.status,
            ROUNDS,
            &format!(
                "{client}, {path} with {budget_ms} ms, a {body_bytes}-byte {framing} body in \
                 {pieces} piece(s) {delay_ms} ms apart after the headers ({agent})"
            ),
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s14_go_http_client_writing_its_body_late_receives_the_503_and_the_504() {
    let built = crate::go_support::build("go_early_answer", "");
    if crate::go_support::peer(&built).is_none() {
        return;
    }
    let url = serve().await;
    for case in CASES.map(Case::parse) {
        let out = crate::go_support::peer(&built)
            .expect("built above")
            .args(case.client_args(&url))
            .output()
            .await
            .expect("the Go client runs");
        case.assert_answered("Go", &out);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s14_python_http_clients_writing_their_body_late_receive_the_503_and_the_504() {
    let Some(python) = python_with_requests() else {
        return;
    };
    let url = serve().await;
    let script = interop_script("python_early_answer.py");
    // The standard library's http.client gives up at the first broken pipe: without the
    // layer's drain, 20 of 20 rounds of the chunked keep-alive refusal failed with
    // `BrokenPipeError`. requests (urllib3 2) reads the answer after a broken pipe, so it
    // receives every answer with or without the drain; it is here for the answers themselves.
    for client in ["stdlib", "requests"] {
        for case in CASES.map(Case::parse) {
            let out = tokio::process::Command::new(&python)
                .arg(&script)
                .arg(client)
                .args(case.client_args(&url))
                .output()
                .await
                .expect("the Python client runs");
            case.assert_answered(&format!("Python {client}"), &out);
        }
    }
}
