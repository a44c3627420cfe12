//! S14 / C18 over real sockets: an answer the server layer makes before the request body was
//! read (refused 503, malformed 400, expired 504 on arrival, and 504 at the deadline while the
//! handler is still waiting for the body) reaches an HTTP/1.1 client that writes its body only
//! after its headers.
//!
//! The client here is a raw TCP socket, so nothing in it hides a reset: it writes the request
//! head announcing a 1 MiB body, waits until the server's answer has started to arrive, then
//! writes the whole body in 64 KiB chunks 1 ms apart, then reads the response to the end.
//! Before C18 was kept, the server closed the connection with the body unread and the client's
//! writes failed with `EPIPE`/`ECONNRESET` (as Node's `http` client reported `write EPIPE`
//! instead of the 503). Every case runs 30 times. Two Node cases run the same exchange through
//! Node's `http` module when `node` is on `PATH`; with `HOPBUDGET_REQUIRE_SERVICES=1` a
//! missing `node` fails.
//!
//! An HTTP/2 case checks the other half of C18: there the layer leaves the unread body to
//! hyper, which resets only the stream (`RST_STREAM(NO_ERROR)`, RFC 9113 §8.1), and the same
//! connection carries the next request.
#![cfg(feature = "axum")]

use std::time::Duration;

use axum::Router;
use axum::routing::post;
use bytes::Bytes;
use hopbudget::Profile;
use hopbudget::http::server::ServerBudgetLayer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The announced and written request body: 1 MiB.
const BODY_LEN: usize = 1 << 20;
/// Each case runs this many times; one failure fails the case.
const ROUNDS: usize = 30;

/// An axum server whose `/upload` route needs 200 ms of budget and whose `/upload-open` route
/// admits any budget; both handlers read the whole body, so only the layer's own answers
/// leave a body unread: on `/upload` before the handler runs, on `/upload-open` at the
/// deadline, while the handler waits for the body the client has not written yet.
async fn serve() -> std::net::SocketAddr {
    let profile = Profile::from_yaml(
        "service: upload-svc\nroutes: [{path: /upload, min_budget_ms: 200}]",
        "inline",
    )
    .unwrap();
    let router = Router::new()
        .route(
            "/upload",
            post(|body: Bytes| async move { format!("got {}", body.len()) }),
        )
        .route(
            "/upload-open",
            post(|body: Bytes| async move { format!("got {}", body.len()) }),
        )
        .layer(ServerBudgetLayer::new(profile));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
}

/// One parsed HTTP/1.1 response.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The raw client: head, wait for the answer to start, the whole body, then the answer.
/// `Err` names the step that failed, so a broken pipe is reported as such.
async fn exchange(
    addr: std::net::SocketAddr,
    path: &str,
    timeout_header: &str,
) -> Result<Answer, String> {
    let mut stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/octet-stream\r\n\
         content-length: {BODY_LEN}\r\nx-request-timeout-ms: {timeout_header}\r\n\r\n"
    );
    stream
        .write_all(head.as_bytes())
        .await
        .map_err(|e| format!("writing the head: {e}"))?;

    // The layer answers without reading the body: wait until that answer has reached this
    // socket, so the body below is written after the server decided, as a slow uploader's is.
    let mut probe = [0u8; 1];
    match tokio::time::timeout(Duration::from_secs(5), stream.peek(&mut probe)).await {
        Ok(Ok(n)) if n > 0 => {}
        Ok(Ok(_)) => return Err("the server closed before answering".into()),
        Ok(Err(e)) => return Err(format!("waiting for the answer: {e}")),
        Err(_) => return Err("no answer within 5 s of the head".into()),
    }

    // Paced as a client on a real network would write it: loopback would otherwise take the
    // whole body into socket buffers at once, and a server that closes after reading only a
    // part of it would go unnoticed.
    let chunk = vec![b'x'; 64 * 1024];
    let mut written = 0;
    while written < BODY_LEN {
        stream
            .write_all(&chunk)
            .await
            .map_err(|e| format!("writing the body after {written} bytes: {e}"))?;
        written += chunk.len();
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    let mut raw = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        let mut buf = [0u8; 8192];
        loop {
            if let Some(answer) = parse(&raw)? {
                return Ok(answer);
            }
            match stream.read(&mut buf).await {
                Ok(0) => return Err(format!("connection closed mid-answer after {raw:?}")),
                Ok(n) => raw.extend_from_slice(&buf[..n]),
                Err(e) => return Err(format!("reading the answer: {e}")),
            }
        }
    })
    .await;
    read.unwrap_or_else(|_| Err("the answer did not complete within 5 s".into()))
}

/// A complete response in `raw`, `None` while more bytes are needed.
fn parse(raw: &[u8]) -> Result<Option<Answer>, String> {
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
    let len: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .ok_or("the answer has no content-length")?;
    let body = &raw[end + 4..];
    if body.len() < len {
        return Ok(None);
    }
    Ok(Some(Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&body[..len]).into_owned(),
    }))
}

/// Run `ROUNDS` exchanges on `/upload`; every one must succeed and pass `check`.
async fn every_round(timeout_header: &str, check: impl Fn(&Answer)) {
    every_round_on("/upload", timeout_header, check).await;
}

/// Run `ROUNDS` exchanges on `path`; every one must succeed and pass `check`.
async fn every_round_on(path: &str, timeout_header: &str, check: impl Fn(&Answer)) {
    every_round_at(serve().await, path, timeout_header, check).await;
}

/// [`every_round_on`] against the server at `addr`.
async fn every_round_at(
    addr: std::net::SocketAddr,
    path: &str,
    timeout_header: &str,
    check: impl Fn(&Answer),
) {
    let mut failures = Vec::new();
    for round in 0..ROUNDS {
        match exchange(addr, path, timeout_header).await {
            Ok(answer) => check(&answer),
            Err(e) => failures.push(format!("round {round}: {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {ROUNDS} early answers did not reach the client (C18, S14):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test]
async fn refusal_reaches_a_client_that_writes_its_body_late() {
    every_round("50", |a| {
        assert_eq!(a.status, 503, "{a:?}");
        assert_eq!(a.header("retry-after"), Some("0"), "{a:?}");
        assert_eq!(a.header("x-deadline-required-ms"), Some("200"), "{a:?}");
        assert!(a.header("x-deadline-remaining-ms").is_some(), "{a:?}");
        assert_eq!(a.header("connection"), Some("close"), "{a:?}");
        assert!(a.body.contains("200"), "{a:?}");
    })
    .await;
}

#[tokio::test]
async fn malformed_answer_reaches_a_client_that_writes_its_body_late() {
    every_round("soon", |a| {
        assert_eq!(a.status, 400, "{a:?}");
        assert_eq!(a.header("connection"), Some("close"), "{a:?}");
        assert!(a.body.contains("x-request-timeout-ms"), "{a:?}");
    })
    .await;
}

#[tokio::test]
async fn expiry_reaches_a_client_that_writes_its_body_late() {
    every_round("0", |a| {
        assert_eq!(a.status, 504, "{a:?}");
        assert_eq!(a.header("connection"), Some("close"), "{a:?}");
        assert_eq!(a.body, "deadline expired\n", "{a:?}");
    })
    .await;
}

/// The deadline passes while the handler waits for a body the client writes only after it
/// saw the answer: the layer drops the handler, and with it the body, and answers 504. The
/// body is drained through the layer, so the client reads the 504 instead of a reset.
#[tokio::test]
async fn deadline_answer_reaches_a_client_that_writes_its_body_late() {
    every_round_on("/upload-open", "100", |a| {
        assert_eq!(a.status, 504, "{a:?}");
        assert_eq!(a.header("connection"), Some("close"), "{a:?}");
        assert_eq!(a.header("x-deadline-outcome"), Some("expired"), "{a:?}");
        assert_eq!(a.body, "deadline expired\n", "{a:?}");
    })
    .await;
}

/// The layer around the whole router instead of inside it (as for middleware that must see
/// every request before routing), served by `axum::serve`, which hands the service axum's own
/// body type: the 504 at the deadline drains the body there too.
#[tokio::test]
async fn deadline_answer_reaches_a_client_with_the_layer_outside_the_router() {
    let router = Router::new().route(
        "/upload-open",
        post(|body: Bytes| async move { format!("got {}", body.len()) }),
    );
    let app = tower::ServiceBuilder::new()
        .map_response(axum::response::IntoResponse::into_response)
        .layer(ServerBudgetLayer::new(Profile::default()))
        .service(router);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            axum::ServiceExt::<axum::extract::Request>::into_make_service(app),
        )
        .await
        .unwrap()
    });
    every_round_at(addr, "/upload-open", "100", |a| {
        assert_eq!(a.status, 504, "{a:?}");
        assert_eq!(a.header("connection"), Some("close"), "{a:?}");
        assert_eq!(a.header("x-deadline-outcome"), Some("expired"), "{a:?}");
    })
    .await;
}

/// The handler's own answers are untouched: the body is read by the handler and the
/// connection stays open for the next request.
#[tokio::test]
async fn admitted_upload_keeps_the_connection() {
    let addr = serve().await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    for _ in 0..2 {
        let head = format!(
            "POST /upload HTTP/1.1\r\nhost: {addr}\r\ncontent-length: {BODY_LEN}\r\n\
             x-request-timeout-ms: 5000\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(&vec![b'x'; BODY_LEN]).await.unwrap();
        let mut raw = Vec::new();
        let mut buf = [0u8; 8192];
        let answer = loop {
            if let Some(answer) = parse(&raw).unwrap() {
                break answer;
            }
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed after {raw:?}");
            raw.extend_from_slice(&buf[..n]);
        };
        assert_eq!(answer.status, 200, "{answer:?}");
        assert_eq!(answer.body, format!("got {BODY_LEN}"));
        assert_ne!(answer.header("connection"), Some("close"), "{answer:?}");
    }
}

/// Node's `http` client, as in the report: headers first (`flushHeaders`), then the body
/// after `delay` ms (0: in the next turn of the event loop). A round succeeds when the
/// response ended *and* the whole body was handed to the socket without an error; it prints
/// `ok <status> <retry-after> <body>` or `error <code>`. Errors after a round ended are
/// counted on a last line, `late-errors <n>`.
const NODE_CLIENT: &str = r#"
const http = require('http');
const [port, timeout, rounds, len, delay] = process.argv.slice(1).map(Number);
let late = 0;
function once() {
  return new Promise((resolve) => {
    let done = false, answer = null, flushed = false;
    const settle = (line) => { if (!done) { done = true; resolve(line); } };
    const fail = (e) => { if (done) late++; settle(`error ${e.code || e.message}`); };
    const req = http.request({
      host: '127.0.0.1', port, method: 'POST', path: '/upload', agent: false,
      headers: { 'content-length': len, 'x-request-timeout-ms': String(timeout) },
    });
    req.on('response', (res) => {
      let body = '';
      res.on('data', (d) => { body += d; });
      res.on('end', () => {
        answer = `ok ${res.statusCode} ${res.headers['retry-after']} ${body.trim()}`;
        if (flushed) settle(answer);
      });
      res.on('error', fail);
    });
    req.on('error', fail);
    req.flushHeaders();
    setTimeout(() => {
      req.write(Buffer.alloc(len, 120));
      req.end(() => { flushed = true; if (answer) settle(answer); });
    }, delay);
  });
}
(async () => {
  for (let i = 0; i < rounds; i++) console.log(await once());
  await new Promise((r) => setTimeout(r, 200));
  console.log(`late-errors ${late}`);
})();
"#;

/// Runs [`NODE_CLIENT`] for `ROUNDS` refusals with the body written `delay_ms` after the head.
async fn node_refusals(delay_ms: u64) {
    let node = std::process::Command::new("node").arg("--version").output();
    if node.is_err() {
        let required = std::env::var("HOPBUDGET_REQUIRE_SERVICES").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "HOPBUDGET_REQUIRE_SERVICES=1 but `node` is not on PATH: install Node.js (20 or \
             later) to run the S14 Node client case"
        );
        eprintln!("skipping the Node client case: `node` is not on PATH");
        return;
    }
    let addr = serve().await;
    let out = tokio::process::Command::new("node")
        .arg("-e")
        .arg(NODE_CLIENT)
        .arg(addr.port().to_string())
        .arg("50")
        .arg(ROUNDS.to_string())
        .arg(BODY_LEN.to_string())
        .arg(delay_ms.to_string())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "node failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), ROUNDS + 1, "{stdout}");
    let bad = lines[..ROUNDS]
        .iter()
        .filter(|l| !l.starts_with("ok 503 0 "))
        .count();
    assert!(
        bad == 0 && lines[ROUNDS] == "late-errors 0",
        "{bad} of {ROUNDS} refusals did not reach Node's http client (S14):\n{stdout}"
    );
}

#[tokio::test]
async fn refusal_reaches_nodes_http_client_body_at_once() {
    node_refusals(0).await;
}

#[tokio::test]
async fn refusal_reaches_nodes_http_client_body_5ms_late() {
    node_refusals(5).await;
}

/// HTTP/2 needs nothing from the layer (C18): hyper answers, then resets only the stream with
/// `RST_STREAM(NO_ERROR)` (RFC 9113 §8.1), which tells the client to stop sending because the
/// response is complete. The client reads every refusal whole, stops sending the body it no
/// longer needs to, and the one connection carries all 30 refusals and then an admitted
/// upload.
#[tokio::test]
async fn http2_early_answers_reset_only_the_stream() {
    use http_body_util::{BodyExt, StreamBody};
    use hyper::body::Frame;
    use hyper_util::rt::{TokioExecutor, TokioIo};

    type Chunk = Result<Frame<Bytes>, std::convert::Infallible>;

    let addr = serve().await;
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    let conn = tokio::spawn(conn);

    let request = |timeout: &str| {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Chunk>(4);
        let body = StreamBody::new(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)));
        let req = http::Request::post(format!("http://{addr}/upload"))
            .header("content-length", BODY_LEN.to_string())
            .header("x-request-timeout-ms", timeout)
            .body(body)
            .unwrap();
        (req, tx)
    };
    let chunk = Bytes::from(vec![b'x'; 64 * 1024]);

    for round in 0..ROUNDS {
        let (req, tx) = request("50");
        let res = sender.send_request(req).await.unwrap();
        assert_eq!(res.status(), 503, "round {round}");
        assert!(res.headers().get("connection").is_none(), "round {round}");
        // Write the body after the answer arrived; once the stream is reset the client
        // stops taking it, which ends this loop early.
        let mut sent = 0;
        for _ in 0..BODY_LEN / chunk.len() {
            if tx.send(Ok(Frame::data(chunk.clone()))).await.is_err() {
                break;
            }
            sent += chunk.len();
        }
        // The reset told the client to stop; had the layer drained the body here, as it
        // does on HTTP/1.x, the whole megabyte would have gone out for nothing.
        assert!(
            sent < BODY_LEN,
            "round {round}: the client sent the whole body"
        );
        let text = res.into_body().collect().await.unwrap().to_bytes();
        assert!(
            std::str::from_utf8(&text).unwrap().contains("200 ms"),
            "round {round}: {text:?}"
        );
    }

    let (req, tx) = request("5000");
    let send = tokio::spawn(async move {
        for _ in 0..BODY_LEN / chunk.len() {
            tx.send(Ok(Frame::data(chunk.clone()))).await.unwrap();
        }
    });
    sender.ready().await.unwrap();
    let res = sender.send_request(req).await.unwrap();
    assert_eq!(res.status(), 200);
    let text = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&text[..], format!("got {BODY_LEN}").as_bytes());
    send.await.unwrap();
    assert!(!conn.is_finished(), "the HTTP/2 connection closed");
}
