//! The recipes of the per-language pages (`docs/guide/go.md`, `python.md`, `node.md`,
//! `java.md`; issue #45 item 6), each run behind the real `hopbudget proxy` and held to what
//! its page promises (C25, C26). The recipes live in `interop/recipes/<lang>/`; every code
//! block of a page must be found there verbatim, so the page shows what is run here.
//!
//! Needs Go (`apt-get install golang-go`), `python3` with `requests` and the OpenTelemetry SDK
//! and OTLP/HTTP exporter (`HOPBUDGET_PYTHON`, which `scripts/test-all` points at
//! `target/pyvenv`), `node` (`HOPBUDGET_NODE`) and a JDK 17 (`javac` and `java`,
//! `HOPBUDGET_JAVAC` / `HOPBUDGET_JAVA`). Without one, its tests say so and pass, unless
//! `HOPBUDGET_REQUIRE_SERVICES=1`, where they fail. By hand:
//! `cargo test -p hopbudget-cli --test fleet recipes::`.
//!
//! One file on purpose, over 500 lines: four languages' recipes run through the one harness defined
//! here.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use crate::support::proxy;
use crate::support::proxy::go::{GoService, build, skip_unless_built};
use crate::support::proxy::service::Service;
use crate::support::proxy::{
    PATIENCE, Proxy, field, free_port, get as http_get, program, query_encode,
};
use axum::Router;
use axum::http::HeaderMap;
use axum::routing::{get, post};
use tokio::io::{AsyncBufReadExt, BufReader};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every fenced code block tagged `lang` in `docs/guide/PAGE` is in one of the files under
/// `interop/recipes/DIR/`, verbatim: the page shows the code the tests run.
fn page_blocks_are_recipes(page: &str, lang: &str, dir: &str) {
    let text = std::fs::read_to_string(repo().join("docs/guide").join(page)).unwrap();
    let mut sources = Vec::new();
    collect(&repo().join("interop/recipes").join(dir), &mut sources);
    assert!(
        !sources.is_empty(),
        "no recipes under interop/recipes/{dir}"
    );
    let fence = format!("```{lang}\n");
    let mut blocks = 0;
    let mut rest = text.as_str();
    while let Some(start) = rest.find(&fence) {
        let body = &rest[start + fence.len()..];
        let end = body.find("```").expect("a closed code block");
        let block = &body[..end];
        assert!(
            sources.iter().any(|s| s.contains(block)),
            "this block of docs/guide/{page} is in no file under interop/recipes/{dir}:\n{block}"
        );
        blocks += 1;
        rest = &body[end + 3..];
    }
    assert!(blocks > 0, "docs/guide/{page} has no ```{lang} block");
}

fn collect(dir: &Path, into: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(&path, into);
        } else if let Ok(text) = std::fs::read_to_string(&path) {
            into.push(text);
        }
    }
}

/// What the recipes' outbound calls reach: `GET /echo` answers the headers it got, one per
/// line; `POST /v1/traces` is an OTLP/HTTP collector that keeps the paths it was sent.
struct Destination {
    addr: SocketAddr,
    exports: Arc<Mutex<usize>>,
}

async fn destination() -> Destination {
    let exports = Arc::new(Mutex::new(0));
    let counter = exports.clone();
    let router = Router::new()
        .route(
            "/echo",
            get(|headers: HeaderMap| async move { proxy::headers_text(&headers) }),
        )
        .route(
            "/v1/traces",
            post(move || {
                let counter = counter.clone();
                async move {
                    *counter.lock().unwrap() += 1;
                    ""
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    Destination { addr, exports }
}

/// The value of `name` in an `/echo` body.
fn echoed<'a>(body: &'a str, name: &str) -> Option<&'a str> {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(": "))
}

/// `GET /work` with 300 ms through `proxy`: the caller gets 504 and the hop is recorded
/// `expired` with status 504, not `completed 200`. (The proxy answers the caller with its own
/// 504 body either way: it reads the service's 504 as a downstream expiry, C10.)
async fn answers_504_at_its_deadline(proxy: &mut Proxy) {
    let answer = http_get(proxy.addr, "/work", &[("x-request-timeout-ms", "300")])
        .await
        .unwrap();
    assert_eq!(answer.status, 504, "{answer:?}");
    let hop = proxy
        .await_log(&["hop ended", "route=other", "http_status=5"])
        .await;
    assert!(
        hop.contains("outcome=\"expired\"") && hop.contains("http_status=504"),
        "{hop}"
    );
}

/// `GET ROUTE?to=URL` with 3000 ms and no trace context from the client: the service's call
/// left through the egress, matched to its request (by the `traceparent` the proxy started
/// and the service carried), and the destination (an `/echo`) was told what the request had
/// left less the margin again, not the edge total (1000 ms).
async fn call_gets_its_requests_budget(proxy: &mut Proxy, route: &str, url: &str) {
    let path = format!("{route}?to={}", query_encode(url));
    let answer = http_get(proxy.addr, &path, &[("x-request-timeout-ms", "3000")])
        .await
        .unwrap();
    assert_eq!(answer.status, 200, "{answer:?}");
    let told: u64 = echoed(&answer.body, "x-request-timeout-ms")
        .unwrap_or_else(|| panic!("the call did not go through the egress: {answer:?}"))
        .parse()
        .unwrap();
    // The service was told at most 2994 (C2); its egress restates what is left of that less
    // the margin again.
    assert!(
        told <= 2988 && told > 2000,
        "the destination was told {told}"
    );
    let line = proxy.await_log(&["egress call ended"]).await;
    assert_eq!(field(&line, "matched"), "true", "{line}");
}

// ---------------------------------------------------------------------------------------
// Go (docs/guide/go.md, interop/recipes/go/)

fn go_recipes() -> Option<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    skip_unless_built(BUILT.get_or_init(|| build("recipes/go/service", "")))
}

#[test]
fn the_go_pages_code_is_the_go_recipes() {
    let _module = crate::support::serial::module(module_path!());
    page_blocks_are_recipes("go.md", "go", "go");
}

/// The budget middleware fires a few ms before the proxy: a handler that then returned
/// without writing would send Go's implicit empty 200, recorded `completed 200`.
#[tokio::test]
async fn a_go_handler_answers_504_at_its_deadline_and_the_hop_is_expired() {
    let _module = crate::support::serial::module(module_path!());
    let Some(program) = go_recipes() else {
        return;
    };
    let service = GoService::start(&program).await;
    let mut proxy = Proxy::start(service.addr, None, &[]).await;
    answers_504_at_its_deadline(&mut proxy).await;
}

/// Go's default transport would skip `HTTP_PROXY` for the loopback destination; the recipe's
/// explicit `Transport.Proxy` sends the call through the egress, which matches it.
#[tokio::test]
async fn a_go_call_to_a_loopback_destination_goes_through_the_egress_with_its_budget() {
    let _module = crate::support::serial::module(module_path!());
    let Some(program) = go_recipes() else {
        return;
    };
    let destination = destination().await;
    let egress = format!("127.0.0.1:{}", free_port());
    let mut command = tokio::process::Command::new(&program);
    command.env("HTTP_PROXY", format!("http://{egress}"));
    let service = GoService::spawn(command).await;
    let mut proxy = Proxy::start(service.addr, None, &["--egress", &egress]).await;
    let to = format!("http://{}/echo", destination.addr);
    call_gets_its_requests_budget(&mut proxy, "/call", &to).await;
}

// ---------------------------------------------------------------------------------------
// Python (docs/guide/python.md, interop/recipes/python/)

fn python() -> Option<String> {
    program(
        "HOPBUDGET_PYTHON",
        "python3",
        &[
            "-c",
            "import grpc, requests, opentelemetry.sdk, \
             opentelemetry.exporter.otlp.proto.http.trace_exporter",
        ],
        "`python3 -m venv target/pyvenv && target/pyvenv/bin/pip install grpcio requests \
         opentelemetry-sdk opentelemetry-exporter-otlp-proto-http` (as scripts/test-all does) \
         and HOPBUDGET_PYTHON=target/pyvenv/bin/python",
    )
}

/// The Python recipe service, its spans exported to `collector`, with `env` besides.
async fn python_recipes(python: &str, collector: SocketAddr, env: &[(&str, &str)]) -> Service {
    let mut command = tokio::process::Command::new(python);
    command
        .arg(repo().join("interop/recipes/python/service.py"))
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{collector}"))
        .envs(env.iter().copied());
    Service::spawn(command).await
}

#[test]
fn the_python_pages_code_is_the_python_recipes() {
    let _module = crate::support::serial::module(module_path!());
    page_blocks_are_recipes("python.md", "python", "python");
}

/// The handler checks its budget between steps and answers 504 when it is spent, before the
/// proxy's own deadline: the hop is `expired`, not a late `completed 200`.
#[tokio::test]
async fn a_python_handler_answers_504_at_its_deadline_and_the_hop_is_expired() {
    let _module = crate::support::serial::module(module_path!());
    let Some(python) = python() else {
        return;
    };
    let collector = destination().await;
    let service = python_recipes(&python, collector.addr, &[]).await;
    let mut proxy = Proxy::start(service.addr, None, &[]).await;
    answers_504_at_its_deadline(&mut proxy).await;
}

/// `requests` through `HTTP_PROXY`, the trace context put on by the OpenTelemetry
/// propagator: the call is matched and gets its request's budget. The exporter, to a
/// collector on 127.0.0.1 with `env` keeping it off the egress, never shows up there.
async fn python_exporter_stays_off_the_egress(env: &[(&str, &str)]) {
    let Some(python) = python() else {
        return;
    };
    let collector = destination().await;
    let echo = destination().await;
    let egress = format!("127.0.0.1:{}", free_port());
    let via = format!("http://{egress}");
    let mut env = env.to_vec();
    env.push(("HTTP_PROXY", &via));
    let service = python_recipes(&python, collector.addr, &env).await;
    let mut proxy = Proxy::start(service.addr, None, &["--egress", &egress]).await;
    // By name: NO_PROXY=127.0.0.1 would let the call skip the egress too.
    let to = format!("http://localhost:{}/echo", echo.addr.port());
    let path = format!("/call?to={}", query_encode(&to));
    let answer = http_get(proxy.addr, &path, &[("x-request-timeout-ms", "3000")])
        .await
        .unwrap();
    assert_eq!(answer.status, 200, "{answer:?}");
    let told: u64 = echoed(&answer.body, "x-request-timeout-ms")
        .unwrap_or_else(|| panic!("the call did not go through the egress: {answer:?}"))
        .parse()
        .unwrap();
    assert!(
        told <= 2988 && told > 2000,
        "the destination was told {told}"
    );
    // The request's span has been exported once the collector has it...
    let waited = tokio::time::timeout(PATIENCE, async {
        while *collector.exports.lock().unwrap() == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "the collector got no export");
    // ...so a second call's line comes after any line the export left on the egress.
    http_get(proxy.addr, &path, &[("x-request-timeout-ms", "3000")])
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut calls = 0;
    let stderr = proxy.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    while calls < 2 {
        let line = tokio::time::timeout(PATIENCE, lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("fewer than two egress lines in {seen:#?}"))
            .unwrap()
            .expect("the proxy runs");
        calls += usize::from(line.contains("egress call ended"));
        seen.push(line);
    }
    let collector_at = collector.addr.to_string();
    for line in &seen {
        assert!(
            !line.contains(&collector_at),
            "the exporter went through the egress: {line}"
        );
        if line.contains("egress call ended") {
            assert_eq!(field(line, "matched"), "true", "{line}");
        }
    }
}

/// `NO_PROXY=127.0.0.1`: `requests` matches `NO_PROXY` against the bare host, so
/// `127.0.0.1:4318` there would not keep the exporter out.
#[tokio::test]
async fn a_python_exporter_with_no_proxy_stays_off_the_egress() {
    let _module = crate::support::serial::module(module_path!());
    python_exporter_stays_off_the_egress(&[("NO_PROXY", "127.0.0.1")]).await;
}

/// The exporter's own session with `trust_env = False`: no `NO_PROXY` needed.
#[tokio::test]
async fn a_python_exporter_with_its_own_session_stays_off_the_egress() {
    let _module = crate::support::serial::module(module_path!());
    python_exporter_stays_off_the_egress(&[("RECIPE_EXPORTER", "own-session")]).await;
}

/// grpcio takes lowercase `http_proxy` for a CONNECT tunnel, which the egress refuses (501,
/// UNAVAILABLE); with `grpc.enable_http_proxy=0` it dials the `--egress-to` listener, and the
/// call gets its request's budget in `grpc-timeout`.
#[tokio::test]
async fn a_grpcio_call_to_an_egress_to_listener_gets_its_requests_budget() {
    let _module = crate::support::serial::module(module_path!());
    let Some(python) = python() else {
        return;
    };
    let collector = destination().await;
    let mut grpc_destination = {
        let mut command = tokio::process::Command::new(&python);
        command
            .arg(repo().join("interop/python_service.py"))
            .arg("grpc");
        Service::spawn(command).await
    };
    let egress = format!("127.0.0.1:{}", free_port());
    let via = format!("http://{egress}");
    let env = [
        ("http_proxy", via.as_str()),
        ("RECIPE_EXPORTER", "own-session"),
    ];
    let service = python_recipes(&python, collector.addr, &env).await;
    let to = format!("127.0.0.1:0={}", grpc_destination.addr);
    let mut proxy = Proxy::start(
        service.addr,
        None,
        &["--egress", &egress, "--egress-to", &to],
    )
    .await;
    let path = format!("/grpc?to={}", proxy.egress_to[0]);
    let answer = http_get(proxy.addr, &path, &[("x-request-timeout-ms", "3000")])
        .await
        .unwrap();
    assert_eq!(answer.status, 200, "{answer:?}");
    let arrived = grpc_destination.next_line().await;
    let left: u64 = field(&arrived, "deadline_ms").parse().unwrap();
    assert!(left <= 2988 && left > 2000, "{arrived}");
    let line = proxy.await_log(&["egress call ended"]).await;
    assert_eq!(field(&line, "matched"), "true", "{line}");
}

// ---------------------------------------------------------------------------------------
// Node (docs/guide/node.md, interop/recipes/node/)

fn node() -> Option<String> {
    program(
        "HOPBUDGET_NODE",
        "node",
        &["--version"],
        "install node (20 or later)",
    )
}

async fn node_recipes(node: &str, env: &[(&str, &str)]) -> Service {
    let mut command = tokio::process::Command::new(node);
    command
        .arg(repo().join("interop/recipes/node/service.js"))
        .envs(env.iter().copied());
    Service::spawn(command).await
}

#[test]
fn the_node_pages_code_is_the_node_recipes() {
    let _module = crate::support::serial::module(module_path!());
    page_blocks_are_recipes("node.md", "js", "node");
}

/// The handler's `AbortSignal.timeout` fires before the proxy's deadline; it answers 504
/// itself, recorded `expired`.
#[tokio::test]
async fn a_node_handler_answers_504_at_its_deadline_and_the_hop_is_expired() {
    let _module = crate::support::serial::module(module_path!());
    let Some(node) = node() else {
        return;
    };
    let service = node_recipes(&node, &[]).await;
    let mut proxy = Proxy::start(service.addr, None, &[]).await;
    answers_504_at_its_deadline(&mut proxy).await;
}

/// Node 20's `fetch` ignores `HTTP_PROXY`: set, the call still goes straight to its
/// destination, past the egress, with no deadline. What the recipes below are for.
#[tokio::test]
async fn node_fetch_ignores_http_proxy() {
    let _module = crate::support::serial::module(module_path!());
    let Some(node) = node() else {
        return;
    };
    let destination = destination().await;
    let egress = format!("127.0.0.1:{}", free_port());
    let via = format!("http://{egress}");
    let service = node_recipes(&node, &[("HTTP_PROXY", &via), ("http_proxy", &via)]).await;
    let proxy = Proxy::start(service.addr, None, &["--egress", &egress]).await;
    let to = format!("http://{}/echo", destination.addr);
    let path = format!("/call?to={}", query_encode(&to));
    let answer = http_get(proxy.addr, &path, &[("x-request-timeout-ms", "3000")])
        .await
        .unwrap();
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(
        echoed(&answer.body, "x-request-timeout-ms"),
        None,
        "{answer:?}"
    );
}

/// `fetch` to the `--egress-to` listener: matched by the `traceparent` it carries, it gets
/// its request's budget.
#[tokio::test]
async fn a_node_fetch_to_an_egress_to_listener_gets_its_requests_budget() {
    let _module = crate::support::serial::module(module_path!());
    let Some(node) = node() else {
        return;
    };
    let destination = destination().await;
    let service = node_recipes(&node, &[]).await;
    let to = format!("127.0.0.1:0={}", destination.addr);
    let mut proxy = Proxy::start(service.addr, None, &["--egress-to", &to]).await;
    let url = format!("http://{}/echo", proxy.egress_to[0]);
    call_gets_its_requests_budget(&mut proxy, "/call", &url).await;
}

/// `http` with the egress named as its proxy (absolute form): the same.
#[tokio::test]
async fn a_node_http_call_through_the_egress_as_its_proxy_gets_its_requests_budget() {
    let _module = crate::support::serial::module(module_path!());
    let Some(node) = node() else {
        return;
    };
    let destination = destination().await;
    let egress = format!("127.0.0.1:{}", free_port());
    let service = node_recipes(&node, &[("HOPBUDGET_EGRESS", &egress)]).await;
    let mut proxy = Proxy::start(service.addr, None, &["--egress", &egress]).await;
    let url = format!("http://{}/echo", destination.addr);
    call_gets_its_requests_budget(&mut proxy, "/proxied", &url).await;
}

// ---------------------------------------------------------------------------------------
// Java (docs/guide/java.md, interop/recipes/java/)

/// `java` and the directory `Recipes.java` was compiled into, by the JDK's `javac`.
fn java_recipes() -> Option<(String, PathBuf)> {
    static BUILT: OnceLock<Result<(String, PathBuf), String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let javac = std::env::var("HOPBUDGET_JAVAC").unwrap_or_else(|_| "javac".into());
        let java = std::env::var("HOPBUDGET_JAVA").unwrap_or_else(|_| "java".into());
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("java-recipes");
        let compiled = std::process::Command::new(&javac)
            .arg("-d")
            .arg(&out)
            .arg(repo().join("interop/recipes/java/Recipes.java"))
            .output();
        match compiled {
            Ok(o) if o.status.success() => Ok((java, out)),
            Ok(o) => Err(format!(
                "`{javac}` failed on interop/recipes/java/Recipes.java:\n{}",
                String::from_utf8_lossy(&o.stderr)
            )),
            Err(e) => Err(format!(
                "cannot run `{javac}` ({e}): install a JDK 17 (apt-get install \
                 openjdk-17-jdk-headless), or set HOPBUDGET_JAVAC / HOPBUDGET_JAVA"
            )),
        }
    });
    match built {
        Ok(built) => Some(built.clone()),
        Err(message) => {
            assert!(
                std::env::var("HOPBUDGET_REQUIRE_SERVICES").as_deref() != Ok("1"),
                "{message}"
            );
            eprintln!("skipped: {message}");
            None
        }
    }
}

/// The Java recipe service, its `HTTP_PROXY` naming `egress`.
async fn java_service(java: &str, classes: &Path, egress: &str) -> Service {
    let mut command = tokio::process::Command::new(java);
    command
        .arg("-cp")
        .arg(classes)
        .arg("Recipes")
        .env("HTTP_PROXY", format!("http://{egress}"));
    Service::spawn(command).await
}

#[test]
fn the_java_pages_code_is_the_java_recipes() {
    let _module = crate::support::serial::module(module_path!());
    page_blocks_are_recipes("java.md", "java", "java");
}

/// The handler checks its budget between steps and answers 504 when it is spent: `expired`.
#[tokio::test]
async fn a_java_handler_answers_504_at_its_deadline_and_the_hop_is_expired() {
    let _module = crate::support::serial::module(module_path!());
    let Some((java, classes)) = java_recipes() else {
        return;
    };
    let service = java_service(&java, &classes, "127.0.0.1:9").await;
    let mut proxy = Proxy::start(service.addr, None, &[]).await;
    // A warm JVM, as in production: the first request loads the handler's classes, which
    // can take longer than the 20 ms the recipe keeps to answer in.
    for _ in 0..3 {
        let warm = http_get(proxy.addr, "/warm", &[("x-request-timeout-ms", "1000")]).await;
        assert_eq!(warm.unwrap().status, 404);
    }
    answers_504_at_its_deadline(&mut proxy).await;
}

/// `HttpClient` with the egress as its `ProxySelector`: the call to a loopback destination
/// goes through the egress, matched by the `traceparent` it carries, with its request's
/// budget.
#[tokio::test]
async fn a_java_httpclient_with_the_egress_as_its_proxy_gets_its_requests_budget() {
    let _module = crate::support::serial::module(module_path!());
    let Some((java, classes)) = java_recipes() else {
        return;
    };
    let destination = destination().await;
    let egress = format!("127.0.0.1:{}", free_port());
    let service = java_service(&java, &classes, &egress).await;
    let mut proxy = Proxy::start(service.addr, None, &["--egress", &egress]).await;
    let url = format!("http://{}/echo", destination.addr);
    call_gets_its_requests_budget(&mut proxy, "/call", &url).await;
}
