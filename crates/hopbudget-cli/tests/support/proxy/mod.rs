//! The `hopbudget proxy` binary as a real process, a raw HTTP/1.1 client that hides nothing
//! (a reset is reported as one), and `/metrics` reading; with the services put behind it
//! (in Go and other languages, [`service`], [`go`]) and the certificate for TLS. Shared by the
//! `proxy`, `check`, `operators` and `fleet` test binaries.
//!
//! One file on purpose, over 500 lines: the proxy process handle, the raw client and the metric
//! reader are used together by every proxy test.

pub mod certificate;
pub mod go;
pub mod scenario;
pub mod service;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

/// A bound on waiting for something that must happen; reaching it fails the test. Not a
/// timing assertion: everything here happens in milliseconds.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// A running proxy; killed when dropped.
pub struct Proxy {
    pub child: Child,
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    /// `--egress`, when asked for.
    pub egress: Option<SocketAddr>,
    /// Each `--egress-to`, in order.
    pub egress_to: Vec<SocketAddr>,
    pub stderr: Option<tokio::process::ChildStderr>,
}

impl Proxy {
    /// `hopbudget proxy --listen 127.0.0.1:0 --admin 127.0.0.1:0 --upstream UPSTREAM` plus
    /// `extra` arguments; `profile`, when given, is written to a file and passed.
    pub async fn start(upstream: SocketAddr, profile: Option<&str>, extra: &[&str]) -> Self {
        Self::start_with_env(upstream, profile, extra, &[]).await
    }

    /// [`start`](Self::start) with `env` added to the proxy's environment.
    pub async fn start_with_env(
        upstream: SocketAddr,
        profile: Option<&str>,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_hopbudget"));
        command.envs(env.iter().copied());
        Self::spawn(command, &upstream.to_string(), profile, extra).await
    }

    /// [`start`](Self::start) with `--upstream` given as written (`https://HOST:PORT`, say).
    pub async fn start_with_upstream_arg(upstream: &str, extra: &[&str]) -> Self {
        let command = Command::new(env!("CARGO_BIN_EXE_hopbudget"));
        Self::spawn(command, upstream, None, extra).await
    }

    /// [`start`](Self::start) with at most `nofile` file descriptors (`ulimit -n`).
    pub async fn start_with_nofile(upstream: SocketAddr, extra: &[&str], nofile: u32) -> Self {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(format!("ulimit -n {nofile} && exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_hopbudget"));
        Self::spawn(command, &upstream.to_string(), None, extra).await
    }

    /// Run `command` with the proxy's arguments appended, and wait for its addresses.
    async fn spawn(
        mut command: Command,
        upstream: &str,
        profile: Option<&str>,
        extra: &[&str],
    ) -> Self {
        command
            .args(["proxy", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
            .args(["--upstream", upstream])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(yaml) = profile {
            command.arg("--profile").arg(profile_file(yaml));
        }
        let mut child = command.spawn().expect("the hopbudget binary runs");
        let stdout = child.stdout.take().expect("piped");
        let mut lines = BufReader::new(stdout).lines();
        let (mut addr, mut admin, mut egress, mut egress_to) = (None, None, None, Vec::new());
        while addr.is_none() {
            let line = tokio::time::timeout(PATIENCE, lines.next_line())
                .await
                .expect("the proxy says where it listens")
                .unwrap()
                .unwrap_or_else(|| panic!("the proxy exited: {:?}", child.try_wait()));
            let word = |prefix: &str| {
                line.strip_prefix(prefix)
                    .map(|rest| rest.split([',', ' ']).next().unwrap().parse().unwrap())
            };
            admin = admin.or(word("admin on "));
            egress = egress.or(word("egress on "));
            if line.starts_with("egress to ") {
                let at = line.rsplit(' ').next().unwrap();
                egress_to.push(at.parse().unwrap());
            }
            addr = addr.or(word("listening on "));
        }
        let stderr = child.stderr.take();
        Proxy {
            child,
            addr: addr.unwrap(),
            admin: admin.expect("admin line before the listening line"),
            egress,
            egress_to,
            stderr,
        }
    }

    /// Read the proxy's stderr to its end in a task, discarding it. A test that runs a proxy
    /// long under load and reads none of its lines needs this: once the pipe's buffer is full
    /// the proxy's next line blocks it (its `/metrics` too) until someone reads.
    pub fn discard_stderr(&mut self) {
        let mut stderr = self.stderr.take().expect("stderr is read once");
        tokio::spawn(async move {
            let _ = tokio::io::copy(&mut stderr, &mut tokio::io::sink()).await;
        });
    }

    /// Read the proxy's stderr until a line holds every one of `needles`; that line.
    pub async fn await_log(&mut self, needles: &[&str]) -> String {
        let stderr = self.stderr.take().expect("stderr is read once");
        let mut lines = BufReader::new(stderr).lines();
        let found = tokio::time::timeout(PATIENCE, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if needles.iter().all(|n| line.contains(n)) {
                    return Some(line);
                }
            }
            None
        })
        .await;
        match found {
            Ok(Some(line)) => line,
            _ => panic!("no log line with {needles:?}"),
        }
    }

    /// The admin port's `/metrics`.
    pub async fn metrics(&self) -> String {
        get(self.admin, "/metrics", &[]).await.unwrap().body
    }

    /// Wait until `/metrics` holds `needle`, then return the text; fails after [`PATIENCE`]
    /// saying `what` did not happen.
    pub async fn await_metric(&self, needle: &str, what: &str) -> String {
        tokio::time::timeout(PATIENCE, async {
            loop {
                let text = self.metrics().await;
                if text.contains(needle) {
                    return text;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{what}: no `{needle}` in /metrics"))
    }

    /// Wait until `/metrics` shows `hopbudget_hops_total{..outcome="OUTCOME"..} COUNT`, then
    /// return the text; fails after [`PATIENCE`] with what it showed.
    pub async fn await_outcome(&self, outcome: &str, count: u64) -> String {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let text = self.metrics().await;
            if hops(&text, outcome) == count {
                return text;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no hopbudget_hops_total{{outcome=\"{outcome}\"}} {count} in:\n{text}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The sum of `hopbudget_hops_total` for `outcome` in a Prometheus text.
pub fn hops(metrics: &str, outcome: &str) -> u64 {
    let label = format!("outcome=\"{outcome}\"");
    metrics
        .lines()
        .filter(|l| l.starts_with("hopbudget_hops_total{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// The program named by `var` (default `default`) if `check` runs with it; otherwise `None`
/// after saying what to install, or a failure under `HOPBUDGET_REQUIRE_SERVICES=1`.
pub fn program(var: &str, default: &str, check: &[&str], install: &str) -> Option<String> {
    let program = std::env::var(var).unwrap_or_else(|_| default.into());
    let found = std::process::Command::new(&program)
        .args(check)
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some(program);
    }
    let message = format!(
        "`{program} {}` fails: {install}; or set {var} to one that works",
        check.join(" ")
    );
    assert!(
        std::env::var("HOPBUDGET_REQUIRE_SERVICES").as_deref() != Ok("1"),
        "{message}"
    );
    eprintln!("skipped: {message}");
    None
}

/// A port that was free a moment ago, for an egress listener a service must be told before
/// its sidecar starts.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Serve `router` (axum) on a free loopback port; its address.
pub async fn serve(router: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
}

/// The headers a service saw, one `name: value` line each: what the tests' echo routes answer.
pub fn headers_text(headers: &http::HeaderMap) -> String {
    let mut text = String::new();
    for (name, value) in headers {
        text.push_str(&format!("{name}: {}\n", value.to_str().unwrap_or("?")));
    }
    text
}

/// SIGTERM `child` and wait for it to exit: what a graceful stop of a proxy or a service
/// looks like (a proxy sends its last spans first); its exit status.
pub async fn terminate(child: &mut Child) -> std::process::ExitStatus {
    let pid = child.id().expect("still running").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    tokio::time::timeout(PATIENCE, child.wait())
        .await
        .expect("it exits on SIGTERM")
        .unwrap()
}

fn profile_file(yaml: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let path = std::env::temp_dir().join(format!(
        "hopbudget-proxy-test-{}-{}.yaml",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&path, yaml).unwrap();
    path
}

/// One parsed HTTP/1.1 response.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// `GET path` with `headers` on a fresh connection; the whole answer.
pub async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Result<Answer, String> {
    let mut stream = send_head(addr, "GET", path, headers).await?;
    read_answer(&mut stream).await
}

/// Connect and write a request head (`connection: close` unless `headers` say otherwise).
pub async fn send_head(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<TcpStream, String> {
    let mut stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nhost: {addr}\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("connection"))
    {
        head.push_str("connection: close\r\n");
    }
    head.push_str("\r\n");
    stream
        .write_all(head.as_bytes())
        .await
        .map_err(|e| format!("writing the head: {e}"))?;
    Ok(stream)
}

/// Read one complete answer (a `content-length` or chunked body, or to the close).
pub async fn read_answer(stream: &mut TcpStream) -> Result<Answer, String> {
    let mut raw = Vec::new();
    let read = tokio::time::timeout(PATIENCE, async {
        let mut buf = [0u8; 8192];
        loop {
            let n = match stream.read(&mut buf).await {
                Ok(n) => n,
                Err(e) => return Err(format!("reading the answer: {e} after {raw:?}")),
            };
            if n > 0 {
                raw.extend_from_slice(&buf[..n]);
            }
            if let Some(answer) = parse(&raw, n == 0)? {
                return Ok(answer);
            }
            if n == 0 {
                return Err(format!("connection closed mid-answer after {raw:?}"));
            }
        }
    })
    .await;
    read.unwrap_or_else(|_| Err("no complete answer in time".into()))
}

/// A complete response in `raw`, `None` while more bytes are needed.
fn parse(raw: &[u8], closed: bool) -> Result<Option<Answer>, String> {
    let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = std::str::from_utf8(&raw[..end]).map_err(|e| format!("head not UTF-8: {e}"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let body = &raw[end + 4..];
    let body = if let Some(len) = find("content-length").and_then(|v| v.parse::<usize>().ok()) {
        if body.len() < len {
            return Ok(None);
        }
        body[..len].to_vec()
    } else if find("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        match dechunk(body) {
            Some(body) => body,
            None => return Ok(None),
        }
    } else if closed {
        body.to_vec()
    } else {
        return Ok(None);
    };
    Ok(Some(Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }))
}

/// A complete chunked body, or `None` while its last chunk has not arrived.
fn dechunk(mut raw: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line = raw.windows(2).position(|w| w == b"\r\n")?;
        let size =
            usize::from_str_radix(std::str::from_utf8(&raw[..line]).ok()?.trim(), 16).ok()?;
        raw = &raw[line + 2..];
        if size == 0 {
            return Some(out);
        }
        if raw.len() < size + 2 {
            return None;
        }
        out.extend_from_slice(&raw[..size]);
        raw = &raw[size + 2..];
    }
}

/// A `grpc-timeout` value in whole milliseconds (rounded down), for the tests' checks.
pub fn grpc_timeout_ms(value: &str) -> u64 {
    let (digits, unit) = value.split_at(value.len() - 1);
    let n: u64 = digits
        .parse()
        .unwrap_or_else(|_| panic!("grpc-timeout {value:?}"));
    match unit {
        "H" => n * 3_600_000,
        "M" => n * 60_000,
        "S" => n * 1000,
        "m" => n,
        "u" => n / 1000,
        "n" => n / 1_000_000,
        _ => panic!("grpc-timeout {value:?}"),
    }
}

/// `key=value` from a line a service printed.
pub fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split(' ')
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key} in {line:?}"))
}

/// One unary gRPC call over h2c with an empty message and `headers`: the `grpc-status` (from
/// the headers of a trailers-only answer, else the trailers) and the connection's sender,
/// kept alive by the caller as long as it wants the call to stay.
pub async fn grpc_call(
    addr: std::net::SocketAddr,
    method: &str,
    headers: &[(&str, &str)],
) -> Result<(String, String), String> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let mut req = http::Request::post(format!("http://{addr}{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let req = req
        .body(Full::new(Bytes::from_static(&[0, 0, 0, 0, 0])))
        .unwrap();
    let res = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let head = res.headers().clone();
    let body = res.into_body().collect().await.map_err(|e| e.to_string())?;
    let trailers = body.trailers().cloned().unwrap_or_default();
    let pick = |name: &str| {
        head.get(name)
            .or_else(|| trailers.get(name))
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    Ok((pick("grpc-status"), pick("grpc-message")))
}

/// Percent-encode `url` to put it in a query parameter.
pub fn query_encode(url: &str) -> String {
    url.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The `x-request-timeout-ms` a service printed on arrival.
pub fn told(line: &str) -> u64 {
    assert!(line.starts_with("arrived"), "{line}");
    field(line, "x-request-timeout-ms")
        .parse()
        .unwrap_or_else(|_| panic!("no budget told in {line:?}"))
}
