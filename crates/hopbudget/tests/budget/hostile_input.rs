//! Hostile input at the edge (rule C9, C19), over a real socket: each case has one defined
//! answer, and none may panic, hang or allocate without bound.
//!
//! Requests are written as raw bytes on a TCP stream, so the test controls exactly what
//! arrives (non-ASCII, hundreds of repeated headers, a folded list, a trickled body) instead of
//! what a well-behaved client library would send. Every read is bounded by a generous guard
//! timeout, so a hang fails the test instead of stalling it; the guard is not a speed claim.
//!
//! | input | answer |
//! |---|---|
//! | a budget in the years (`31536000000`, `99999999H`) | clamped to the profile maximum; 200 |
//! | more digits than the carrier allows | 400 naming the header: "more than N digits" |
//! | `0`, `-5`, `-0`, `0m` | already expired: 504, handler not entered |
//! | non-ASCII, inner whitespace, empty | 400 naming the header: "not a decimal number" / "empty value" |
//! | surrounding whitespace | ignored, as HTTP allows |
//! | the same deadline header repeated (below the server's header limit) | the tightest wins |
//! | hundreds of headers (above hyper's limit of 100) | hyper's 431; the layer never runs |
//! | a comma-folded list `100, 200` | 400: a deadline is one number, a list is ambiguous |
//! | forged `x-deadline-*` markers from outside | stripped before the handler (C19) |
//! | a client trickling its body | the handler is bounded by the deadline: 504 at expiry |
//! | a client not reading the response | the body stalls under backpressure; memory bounded |
#![cfg(all(feature = "axum", feature = "reqwest"))]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::http_support::{Live, eventually, profile};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::HeaderMap;
use axum::routing::{get, post};
use hopbudget::RequestBudget;
use hopbudget::http::server::ServerBudgetLayer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest any single exchange may take before the test calls it a hang.
const HANG: Duration = Duration::from_secs(10);

/// The profile every case runs under: 5 s maximum, 800 ms edge total.
const PROFILE: &str = "service: edge\nedge_total_ms: 800\nmax_ms: 5000\n";

/// What the handler saw: how often it was entered, and its last report.
#[derive(Clone, Default)]
struct Seen {
    entered: Arc<AtomicU64>,
}

/// A server whose `/` reports `at_arrival_ms source forged` (forged: how many `x-deadline-*`
/// headers reached the handler), whose `/upload` reads the whole request body, and whose
/// `/flood` streams an endless body counting the bytes it produced.
async fn server(seen: Seen, produced: Arc<AtomicU64>, live: Live) -> std::net::SocketAddr {
    let entered = seen.entered.clone();
    let upload_live = live.clone();
    let router = Router::new()
        .route(
            "/",
            get(move |budget: RequestBudget, headers: HeaderMap| {
                entered.fetch_add(1, Ordering::SeqCst);
                async move {
                    let forged = headers
                        .keys()
                        .filter(|k| k.as_str().starts_with("x-deadline-"))
                        .count();
                    format!(
                        "{} {} {forged}",
                        budget.at_arrival().as_millis(),
                        budget.source().as_str()
                    )
                }
            }),
        )
        .route(
            "/upload",
            post(move |body: Body| {
                // Entered before the body is read, so the count covers the slow read.
                let guard = upload_live.enter();
                async move {
                    let body = axum::body::to_bytes(body, 1 << 20).await;
                    drop(guard);
                    format!("{:?} bytes", body.map(|b| b.len()))
                }
            }),
        )
        .route(
            "/flood",
            get(move || {
                let produced = produced.clone();
                let live = live.clone();
                async move {
                    let guard = Arc::new(live.enter());
                    let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
                    let stream = futures_util::stream::repeat_with(move || {
                        let _alive = &guard;
                        produced.fetch_add(chunk.len() as u64, Ordering::SeqCst);
                        Ok::<_, std::convert::Infallible>(chunk.clone())
                    });
                    Body::from_stream(stream)
                }
            }),
        )
        .layer(ServerBudgetLayer::new(profile(PROFILE)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
}

/// A raw HTTP/1.1 answer: status code and body text.
#[derive(Debug)]
struct Answer {
    status: u16,
    body: String,
}

/// Read one response (the request asked for `Connection: close`) and split it.
async fn read_answer(stream: &mut TcpStream) -> Answer {
    let mut raw = Vec::new();
    tokio::time::timeout(HANG, stream.read_to_end(&mut raw))
        .await
        .expect("the server answered and closed within the guard")
        .expect("read");
    let text = String::from_utf8_lossy(&raw);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    Answer { status, body }
}

/// Send `GET /` with these raw header lines (each without CRLF) and read the answer.
async fn get_raw(addr: std::net::SocketAddr, header_lines: &[Vec<u8>]) -> Answer {
    let mut req = b"GET / HTTP/1.1\r\nhost: test\r\nconnection: close\r\n".to_vec();
    for line in header_lines {
        req.extend_from_slice(line);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"\r\n");
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(&req).await.unwrap();
    read_answer(&mut stream).await
}

fn timeout_ms(value: &[u8]) -> Vec<u8> {
    [b"x-request-timeout-ms: ".as_slice(), value].concat()
}

/// The handler's report as (ms at arrival, source, forged markers seen).
fn report(answer: &Answer) -> (u64, String, usize) {
    assert_eq!(answer.status, 200, "{answer:?}");
    let mut parts = answer.body.split(' ');
    let ms = parts.next().unwrap().parse().unwrap();
    let source = parts.next().unwrap().to_owned();
    let forged = parts.next().unwrap().trim().parse().unwrap();
    (ms, source, forged)
}

async fn start() -> (std::net::SocketAddr, Seen) {
    let seen = Seen::default();
    let addr = server(seen.clone(), Arc::default(), Live::default()).await;
    (addr, seen)
}

/// C9: budgets in the years are clamped to the profile maximum; more digits than a carrier
/// allows is a malformed header, not a huge budget.
#[tokio::test]
async fn budgets_in_the_years_are_clamped() {
    let (addr, _) = start().await;
    for line in [
        timeout_ms(b"31536000000"),                 // one year of milliseconds
        timeout_ms(b"9999999999999999999"),         // 19 digits: the carrier's limit
        b"grpc-timeout: 99999999H".to_vec(),        // about 11 400 years
        b"connect-timeout-ms: 9999999999".to_vec(), // Connect's largest
    ] {
        let (ms, _, _) = report(&get_raw(addr, std::slice::from_ref(&line)).await);
        assert!(
            (4_900..=5_000).contains(&ms),
            "{}: clamped to the 5 s maximum, got {ms}",
            String::from_utf8_lossy(&line)
        );
    }
    for (line, reason) in [
        (timeout_ms(b"18446744073709551616"), "more than 19 digits"),
        (b"grpc-timeout: 123456789H".to_vec(), "more than 8 digits"),
    ] {
        let answer = get_raw(addr, &[line]).await;
        assert_eq!(answer.status, 400, "{answer:?}");
        assert!(answer.body.contains(reason), "{answer:?}");
    }
}

/// C9: zero and negative budgets are already expired: 504, and the handler never runs.
#[tokio::test]
async fn zero_and_negative_budgets_are_expired_before_the_handler() {
    let (addr, seen) = start().await;
    for line in [
        timeout_ms(b"0"),
        timeout_ms(b"-5"),
        timeout_ms(b"-0"),
        timeout_ms(b"-99999999999"),
        b"grpc-timeout: 0m".to_vec(),
        b"x-envoy-expected-rq-timeout-ms: -1".to_vec(),
    ] {
        let answer = get_raw(addr, std::slice::from_ref(&line)).await;
        assert_eq!(
            answer.status,
            504,
            "{}: {answer:?}",
            String::from_utf8_lossy(&line)
        );
    }
    assert_eq!(seen.entered.load(Ordering::SeqCst), 0);
}

/// C9: non-ASCII digits, bytes outside ASCII, inner whitespace and an empty value are each a
/// 400 naming the header and the reason; surrounding whitespace is allowed by HTTP and ignored.
#[tokio::test]
async fn non_ascii_whitespace_and_empty_values() {
    let (addr, seen) = start().await;
    for (value, reason) in [
        ("１００".as_bytes().to_vec(), "not a decimal number"), // full-width digits
        (b"\xff\xfe100".to_vec(), "not a decimal number"),      // obs-text bytes
        (b"1 00".to_vec(), "not a decimal number"),
        (b"100\t0".to_vec(), "not a decimal number"),
        (b"".to_vec(), "empty value"),
        (b"+100".to_vec(), "not a decimal number"),
        (b"1e3".to_vec(), "not a decimal number"),
    ] {
        let answer = get_raw(addr, &[timeout_ms(&value)]).await;
        assert_eq!(answer.status, 400, "{value:?}: {answer:?}");
        assert!(
            answer.body.contains("x-request-timeout-ms") && answer.body.contains(reason),
            "{value:?}: {answer:?}"
        );
    }
    assert_eq!(seen.entered.load(Ordering::SeqCst), 0);
    let (ms, source, _) = report(&get_raw(addr, &[timeout_ms(b" \t 300 \t ")]).await);
    assert!(
        (290..=300).contains(&ms) && source == "relative-ms",
        "{ms} {source}"
    );
}

/// Repeated deadline headers: every value is read and the tightest wins, however many the
/// server's header limit lets through; above hyper's limit (100 headers) hyper answers 431
/// itself and the handler never runs. One malformed value among them spoils the request.
#[tokio::test]
async fn hundreds_of_repeated_deadline_headers() {
    let (addr, seen) = start().await;
    let mut lines: Vec<_> = (0..90)
        .map(|i| timeout_ms((3_000 - i).to_string().as_bytes()))
        .collect();
    lines.insert(45, timeout_ms(b"250"));
    let (ms, _, _) = report(&get_raw(addr, &lines).await);
    assert!((240..=250).contains(&ms), "the tightest of 91 wins: {ms}");

    lines.push(timeout_ms(b"soon"));
    assert_eq!(get_raw(addr, &lines).await.status, 400);

    let before = seen.entered.load(Ordering::SeqCst);
    let many: Vec<_> = (0..500).map(|_| timeout_ms(b"1000")).collect();
    let answer = get_raw(addr, &many).await;
    assert_eq!(answer.status, 431, "hyper's header limit: {answer:?}");
    assert_eq!(seen.entered.load(Ordering::SeqCst), before);
}

/// A comma-folded list is not a budget: a deadline field is a single number, and picking one
/// element would hide a broken proxy. 400, naming the header.
#[tokio::test]
async fn a_comma_folded_header_is_malformed() {
    let (addr, seen) = start().await;
    for value in [&b"100, 200"[..], b"100,200", b"100,", b",100"] {
        let answer = get_raw(addr, &[timeout_ms(value)]).await;
        assert_eq!(answer.status, 400, "{value:?}: {answer:?}");
        assert!(answer.body.contains("x-request-timeout-ms"), "{answer:?}");
    }
    let answer = get_raw(addr, &[b"grpc-timeout: 100m, 200m".to_vec()]).await;
    assert_eq!(answer.status, 400, "{answer:?}");
    assert_eq!(seen.entered.load(Ordering::SeqCst), 0);
}

/// C19: the layers' own markers (`x-deadline-outcome`, `x-deadline-required-ms`,
/// `x-deadline-remaining-ms`, any `x-deadline-*`) arriving from outside are stripped at the edge,
/// so a client cannot make a handler or a downstream hop believe a refusal happened.
///
/// The carriers are read by walking a small header map and by looking them up in a large one;
/// the markers go on either path, wherever they sit among the carriers.
#[tokio::test]
async fn forged_internal_markers_are_stripped() {
    let (addr, _) = start().await;
    let forged = || {
        vec![
            b"x-deadline-outcome: refused".to_vec(),
            b"x-deadline-required-ms: 1".to_vec(),
            b"x-deadline-remaining-ms: 999999".to_vec(),
            b"x-deadline-anything: 1".to_vec(),
        ]
    };
    let filler = |n: usize| (0..n).map(|i| format!("x-filler-{i}: {i}").into_bytes());
    let cases: [(&str, Vec<Vec<u8>>, bool); 4] = [
        (
            "carrier first, small map",
            [vec![timeout_ms(b"400")], forged()].concat(),
            true,
        ),
        (
            "carrier last, small map",
            [forged(), vec![timeout_ms(b"400")]].concat(),
            true,
        ),
        ("no carrier, small map", forged(), false),
        (
            "carrier, large map",
            [vec![timeout_ms(b"400")], forged(), filler(10).collect()].concat(),
            true,
        ),
    ];
    for (case, lines, has_carrier) in cases {
        let answer = get_raw(addr, &lines).await;
        let (ms, _, forged) = report(&answer);
        if has_carrier {
            assert!((390..=400).contains(&ms), "{case}: {ms}");
        }
        assert_eq!(
            forged, 0,
            "{case}: forged x-deadline-* headers reached the handler"
        );
    }
}

/// A client that trickles its request body cannot hold the handler past the deadline: the
/// body read runs inside the handler, which the deadline bounds (504), and the handler's work
/// is dropped. Without a deadline header the edge total bounds it the same way (C8).
#[tokio::test]
async fn a_slow_client_trickling_its_body_gets_a_504_at_the_deadline() {
    let live = Live::default();
    let addr = server(Seen::default(), Arc::default(), live.clone()).await;
    for header in [Some(&b"x-request-timeout-ms: 300"[..]), None] {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let mut head = b"POST /upload HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\
                         content-length: 100000\r\n"
            .to_vec();
        if let Some(h) = header {
            head.extend_from_slice(h);
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(b"\r\n");
        stream.write_all(&head).await.unwrap();
        let (mut rd, mut wr) = stream.into_split();
        let trickle = tokio::spawn(async move {
            // One byte every 20 ms: 100 000 bytes would take more than half an hour.
            for _ in 0..100_000 {
                if wr.write_all(b"x").await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        let mut raw = Vec::new();
        let mut buf = [0u8; 4096];
        // The server may not close while the client still writes; read the head only.
        let status = tokio::time::timeout(HANG, async {
            loop {
                let n = rd.read(&mut buf).await.unwrap();
                assert!(n > 0, "closed without an answer");
                raw.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&raw);
                if text.contains("\r\n\r\n") {
                    return text.split(' ').nth(1).unwrap().to_owned();
                }
            }
        })
        .await
        .expect("answered within the guard");
        trickle.abort();
        assert_eq!(status, "504", "{}", String::from_utf8_lossy(&raw));
        assert!(
            eventually(HANG, || live.get() == 0).await,
            "the handler's body read was dropped"
        );
    }
}

/// A client that never reads the response cannot make the server buffer without bound: the
/// body stream is polled only as fast as the socket drains (backpressure), so the bytes
/// produced stay near the socket buffers' size. When the client goes, the body is dropped.
#[tokio::test]
async fn a_slow_reader_is_held_back_by_backpressure() {
    let produced = Arc::new(AtomicU64::new(0));
    let live = Live::default();
    let addr = server(Seen::default(), produced.clone(), live.clone()).await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /flood HTTP/1.1\r\nhost: test\r\nx-request-timeout-ms: 2000\r\n\r\n")
        .await
        .unwrap();
    // Let the server fill every buffer it can, well past the 2 s deadline.
    assert!(eventually(HANG, || produced.load(Ordering::SeqCst) > 0).await);
    let mut last = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = produced.load(Ordering::SeqCst);
        if now == last {
            break;
        }
        last = now;
    }
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    let stalled = produced.load(Ordering::SeqCst);
    assert!(
        stalled < 64 * 1024 * 1024,
        "produced {stalled} bytes for a client that read none"
    );
    assert_eq!(live.get(), 1, "the body waits for the reader");

    // A little reading lets a little more through; then the client goes away.
    let mut buf = vec![0u8; 256 * 1024];
    let n = stream.read(&mut buf).await.unwrap();
    assert!(n > 0);
    drop(stream);
    assert!(
        eventually(HANG, || live.get() == 0).await,
        "the body was dropped with the connection"
    );
    eprintln!("slow reader: {stalled} bytes produced before the stall");
}
