//! One hop's edges over real sockets: refusal (S2), what arrives on the wire (missing,
//! malformed, huge), background work (S11), streams (S12), calls outside any request (C8),
//! and the tower client layer on hyper-util's `Client`.
#![cfg(all(feature = "axum", feature = "reqwest"))]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::http_support::{client, eventually, fail, profile, serve};
use axum::Router;
use axum::http::StatusCode;
use axum::response::sse::{Event, Sse};
use axum::routing::get;
use bytes::Bytes;
use hopbudget::http::client::ClientBudgetLayer;
use hopbudget::http::server::ServerBudgetLayer;
use hopbudget::{BudgetError, RequestBudget, Source};
use http_body_util::Full;
use tower::{ServiceBuilder, ServiceExt};

/// A server whose `/` handler counts its entries and reports the budget it got as
/// `at_arrival_ms source`.
async fn reporting(p: &hopbudget::Profile, entered: Arc<AtomicU64>) -> String {
    serve(
        Router::new()
            .route(
                "/",
                get(move |budget: RequestBudget| {
                    entered.fetch_add(1, Ordering::SeqCst);
                    async move {
                        format!(
                            "{} {}",
                            budget.at_arrival().as_millis(),
                            budget.source().as_str()
                        )
                    }
                }),
            )
            .layer(ServerBudgetLayer::new(p.clone())),
    )
    .await
}

async fn get_with(url: &str, header: Option<&str>) -> (StatusCode, String) {
    let mut req = reqwest::Client::new().get(url);
    if let Some(h) = header {
        req = req.header("x-request-timeout-ms", h);
    }
    let res = req.send().await.unwrap();
    (res.status(), res.text().await.unwrap())
}

/// S2: pricing calls tax with about 120 ms left; tax needs 200 ms. Tax refuses, its handler
/// (the database) is never entered, and the chain fails with one clear cause.
#[tokio::test]
async fn s2_tax_refuses_and_its_handler_never_runs() {
    let tax_profile = profile("service: tax\nroutes: [{path: /, min_budget_ms: 200}]");
    let db_queries = Arc::new(AtomicU64::new(0));
    let tax = reporting(&tax_profile, db_queries.clone()).await;

    let p = profile("service: pricing");
    let http = client(&p);
    let tax_url = tax.clone();
    let pricing = serve(
        Router::new()
            .route(
                "/",
                get(move || {
                    let (http, tax) = (http.clone(), tax_url.clone());
                    async move {
                        match http.get(&tax).send().await {
                            Ok(res) => (res.status(), res.text().await.unwrap()),
                            Err(e) => fail(&e),
                        }
                    }
                }),
            )
            .layer(ServerBudgetLayer::new(p.clone())),
    )
    .await;

    // 126 ms at pricing: it forwards at most 120 ms to tax.
    let (status, body) = get_with(&pricing, Some("126")).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("needs 200 ms"), "one clear cause: {body}");
    assert_eq!(
        db_queries.load(Ordering::SeqCst),
        0,
        "the handler never ran"
    );

    // Straight at tax: the refusal says what was needed and what was left.
    let res = reqwest::Client::new()
        .get(&tax)
        .header("x-request-timeout-ms", "120")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers()["retry-after"], "0");
    assert_eq!(res.headers()["x-deadline-required-ms"], "200");
    let remaining: u64 = res.headers()["x-deadline-remaining-ms"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((100..=120).contains(&remaining), "{remaining}");
    assert_eq!(db_queries.load(Ordering::SeqCst), 0);

    // Enough budget: the handler runs.
    assert_eq!(get_with(&tax, Some("500")).await.0, 200);
    assert_eq!(db_queries.load(Ordering::SeqCst), 1);
}

/// C8, C9: missing is the edge total, exactly (#32 item 11: the hop's budget at arrival is
/// rooted and reported from one clock read, as an explicit header's is); malformed is a 400
/// naming the header; huge is clamped.
#[tokio::test]
async fn missing_malformed_and_huge_headers() {
    let p = profile("service: edge\nedge_total_ms: 1500\nmax_ms: 5000");
    let entered = Arc::new(AtomicU64::new(0));
    let url = reporting(&p, entered.clone()).await;

    let (status, body) = get_with(&url, None).await;
    assert_eq!(status, 200);
    assert_eq!(
        body, "1500 fallback",
        "the edge total, not a millisecond less"
    );
    let (status, body) = get_with(&url, Some("800")).await;
    assert_eq!(status, 200);
    assert_eq!(body, "800 relative-ms");

    let (status, body) = get_with(&url, Some("12ms")).await;
    assert_eq!(status, 400);
    assert!(
        body.contains("x-request-timeout-ms") && body.contains("not a decimal number"),
        "names the header and the reason: {body}"
    );

    let (status, body) = get_with(&url, Some("99999999999")).await;
    assert_eq!(status, 200);
    let ms: u64 = body.split_once(' ').unwrap().0.parse().unwrap();
    assert!(
        (4990..=5000).contains(&ms),
        "clamped to the maximum, got {ms}"
    );
    assert_eq!(
        entered.load(Ordering::SeqCst),
        3,
        "the malformed request never entered"
    );
}

/// C8: a call made outside any request uses the edge total, never an unbounded wait.
#[tokio::test]
async fn a_call_outside_any_request_uses_the_edge_total() {
    let p = profile("service: cron\nedge_total_ms: 700");
    let url = reporting(&p, Arc::default()).await;
    let body = client(&p)
        .get(&url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let (ms, source) = body.split_once(' ').unwrap();
    let ms: u64 = ms.parse().unwrap();
    // 700 minus 5 ms margin minus 1 ms transit, and the time the call took.
    assert!((400..=694).contains(&ms), "{ms}");
    assert_eq!(source, "relative-ms");
}

/// S11: a confirmation e-mail spawned by a request finishes after the response went out,
/// under its own deadline.
#[tokio::test]
async fn s11_background_task_finishes_after_the_response() {
    let p = profile("service: checkout");
    let sent = Arc::new(AtomicBool::new(false));
    let outcome = Arc::new(std::sync::Mutex::new(None));
    let url = {
        let (sent, outcome) = (sent.clone(), outcome.clone());
        serve(
            Router::new()
                .route(
                    "/",
                    get(move |budget: RequestBudget| {
                        let (sent, outcome) = (sent.clone(), outcome.clone());
                        async move {
                            let email =
                                hopbudget::spawn_detached(Duration::from_secs(5), async move {
                                    tokio::time::sleep(Duration::from_millis(300)).await;
                                    let mine = RequestBudget::current().expect("own budget");
                                    sent.store(true, Ordering::SeqCst);
                                    (mine.source(), mine.linked_from())
                                });
                            tokio::spawn(async move {
                                *outcome.lock().unwrap() = Some((email.await, budget.id()));
                            });
                            "order placed"
                        }
                    }),
                )
                .layer(ServerBudgetLayer::new(p.clone())),
        )
        .await
    };
    // The request budget (150 ms) ends long before the e-mail is done.
    let (status, _) = get_with(&url, Some("150")).await;
    assert_eq!(status, 200);
    assert!(
        !sent.load(Ordering::SeqCst),
        "the response did not wait for the e-mail"
    );
    assert!(eventually(Duration::from_secs(3), || sent.load(Ordering::SeqCst)).await);
    assert!(eventually(Duration::from_secs(1), || outcome.lock().unwrap().is_some()).await);
    let (result, request_id) = outcome.lock().unwrap().take().unwrap();
    let (source, linked) = result.expect("finished under its own deadline");
    assert_eq!(source, Source::Detached);
    assert_eq!(
        linked,
        Some(request_id),
        "keeps the link to its request (C12)"
    );
}

/// S12: a server-sent-events endpoint is not cut off at the request deadline once its first
/// chunk is out, and neither is the task producing its events (spawned with the request's
/// budget, C11); a first chunk later than the deadline is a 504.
#[tokio::test]
async fn s12_sse_outlives_the_request_deadline() {
    let p = profile("service: feed\nroutes: [{path: /events/*, mode: stream}]");
    // What the producer saw at each tick: whether its budget had ended, and what was left.
    let ticks = Arc::new(std::sync::Mutex::new(Vec::new()));
    let handler = |first_ms: u64| {
        let ticks = ticks.clone();
        move || {
            let ticks = ticks.clone();
            async move {
                let (tx, rx) = tokio::sync::mpsc::channel::<u32>(8);
                // The producer runs under a child of the request's budget.
                hopbudget::spawn(async move {
                    for n in 0..6u32 {
                        let wait = if n == 0 { first_ms } else { 100 };
                        tokio::time::sleep(Duration::from_millis(wait)).await;
                        let budget = RequestBudget::current().expect("ambient budget");
                        ticks
                            .lock()
                            .unwrap()
                            .push((n, budget.end_cause(), budget.remaining()));
                        if tx.send(n).await.is_err() {
                            return;
                        }
                    }
                });
                let events = futures_util::stream::unfold(rx, |mut rx| async move {
                    let n = rx.recv().await?;
                    let event = Event::default().data(format!("tick {n}"));
                    Some((Ok::<_, std::convert::Infallible>(event), rx))
                });
                Sse::new(events)
            }
        }
    };
    let url = serve(
        Router::new()
            .route("/events/fast", get(handler(20)))
            .route("/events/slow", get(handler(400)))
            .layer(ServerBudgetLayer::new(p.clone())),
    )
    .await;

    let started = tokio::time::Instant::now();
    let mut res = reqwest::Client::new()
        .get(format!("{url}/events/fast"))
        .header("x-request-timeout-ms", "200")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let mut text = String::new();
    while let Some(chunk) = res.chunk().await.unwrap() {
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    assert_eq!(text.matches("data: tick").count(), 6, "{text}");
    assert!(
        started.elapsed() > Duration::from_millis(500),
        "the stream ran past its 200 ms deadline"
    );
    let seen = ticks.lock().unwrap().clone();
    assert_eq!(seen.len(), 6, "the producer was not cut: {seen:?}");
    for (n, cause, remaining) in &seen {
        assert_eq!(*cause, None, "tick {n}: the producer's budget was live");
        // Tick 0 is the first chunk itself, produced under the request deadline.
        assert!(
            *n == 0 || *remaining > Duration::from_secs(1),
            "tick {n}: the producer runs under the stream lifetime, {remaining:?} left"
        );
    }

    let res = reqwest::Client::new()
        .get(format!("{url}/events/slow"))
        .header("x-request-timeout-ms", "200")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 504, "no first chunk within the deadline");
}

/// The tower client layer on hyper-util's `Client`: stamps the forward budget, and refuses
/// below the threshold without opening a connection (C3).
#[tokio::test]
async fn tower_client_layer_on_hyper_util() {
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;

    let p = profile("service: hyper");
    let entered = Arc::new(AtomicU64::new(0));
    let url = reporting(&p, entered.clone()).await;
    let hyper = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let client = ServiceBuilder::new()
        .layer(ClientBudgetLayer::new(p.clone()))
        .service(hyper);

    let budget = RequestBudget::local(Duration::from_millis(400), p.policy());
    let req = http::Request::get(&url)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let res = budget.scope(client.clone().oneshot(req)).await.unwrap();
    assert_eq!(res.status(), 200);
    let body = http_body_util::BodyExt::collect(res.into_body())
        .await
        .unwrap()
        .to_bytes();
    let ms: u64 = std::str::from_utf8(&body)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!((150..=394).contains(&ms), "forward budget, got {ms}");

    // A port that accepts nothing: a refused call must not even connect.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    silent.set_nonblocking(true).unwrap();
    let short = RequestBudget::local(Duration::from_millis(12), p.policy());
    let req = http::Request::get(format!("http://{}/", silent.local_addr().unwrap()))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let err = short.scope(client.oneshot(req)).await.unwrap_err();
    assert!(
        matches!(BudgetError::find(&*err), Some(BudgetError::Refused(_))),
        "{err}"
    );
    assert_eq!(
        silent.accept().unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock,
        "no connection was opened"
    );
    assert_eq!(entered.load(Ordering::SeqCst), 1);
}

/// With trusted clocks the profile stamps absolute epoch ms, and the callee reads them.
#[tokio::test]
async fn epoch_carrier_when_the_profile_trusts_clocks() {
    let p = profile("service: trusted\ninbound: [epoch-ms]\noutbound: {http: epoch-ms}");
    let url = reporting(&p, Arc::default()).await;
    let res = client(&p)
        .get(&url)
        .with_extension(RequestBudget::local(Duration::from_millis(400), p.policy()))
        .send()
        .await
        .unwrap();
    let body = res.text().await.unwrap();
    let (ms, source) = body.split_once(' ').unwrap();
    assert_eq!(source, "epoch-ms");
    let ms: u64 = ms.parse().unwrap();
    assert!((200..=394).contains(&ms), "{ms}");
}

/// C7: a handler that blocked past its deadline and only then asks for the budget's token
/// gets one that is already cancelled, so work it would start on the token's word does not
/// start late. The timer that cancels tokens at the deadline is armed only when a token is
/// first made, and has not run yet at that point.
#[tokio::test]
async fn c7_a_token_taken_after_the_deadline_is_already_cancelled() {
    let p = profile("service: blocker");
    let seen = Arc::new(std::sync::Mutex::new(None));
    let url = serve(
        Router::new()
            .route(
                "/",
                get({
                    let seen = seen.clone();
                    move |budget: RequestBudget| async move {
                        // Synchronous work the handler did not yield in: the layer's own timer
                        // cannot run on this task meanwhile.
                        std::thread::sleep(Duration::from_millis(120));
                        let token = budget.token();
                        *seen.lock().unwrap() = Some((token.is_cancelled(), budget.end_cause()));
                        "late"
                    }
                }),
            )
            .layer(ServerBudgetLayer::new(p)),
    )
    .await;
    let _ = get_with(&url, Some("40")).await;
    let seen = *seen.lock().unwrap();
    assert_eq!(
        seen,
        Some((true, Some(hopbudget::EndCause::Expired))),
        "the token handed out after the deadline must be cancelled at once, as expiry"
    );
}
