//! The HTTP client side over real sockets: the response body is bounded by the budget, not
//! only the head (C4, C5); a per-call timeout combines with the budget as the tighter of the
//! two (C16); deadline headers go only to trusted hosts (C19, S16). For the tower layer on
//! hyper-util's `Client` and for the reqwest middleware.
//!
//! One file on purpose, over 500 lines: the client side's tests share the servers built here.
#![cfg(all(feature = "axum", feature = "reqwest"))]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::http_support::serve;
use axum::Router;
use axum::http::HeaderMap;
use axum::routing::get;
use bytes::Bytes;
use hopbudget::http::client::ClientBudgetLayer;
use hopbudget::http::reqwest::{BudgetMiddleware, budget_error};
use hopbudget::{BudgetError, Profile, RequestBudget};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::{ServiceBuilder, ServiceExt};

/// Loose: the budget is 300 ms and the server would hold the caller for 10 s. Never a tight
/// timing assertion, only "ended long before the server was done".
const LOOSE: Duration = Duration::from_secs(2);

/// A raw HTTP/1.1 server that answers every request with its head at once and then one body
/// byte every 100 ms for 10 s. Returns `http://127.0.0.1:PORT/`.
async fn trickling_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                // Read the request head (no request body in these tests).
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let reply =
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 100\r\n\r\n";
                if sock.write_all(reply).await.is_err() {
                    return;
                }
                for _ in 0..100 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    if sock.write_all(b"x").await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("http://{addr}/")
}

/// A server that records the request headers it got, then answers after `delay`.
async fn recording_server(delay: Duration) -> (String, Arc<Mutex<Vec<HeaderMap>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let url = serve(Router::new().route(
        "/",
        get(move |headers: HeaderMap| {
            log.lock().unwrap().push(headers);
            async move {
                tokio::time::sleep(delay).await;
                "done"
            }
        }),
    ))
    .await;
    (format!("{url}/"), seen)
}

fn hyper_client(
    layer: ClientBudgetLayer,
) -> hopbudget::http::client::ClientBudget<
    Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
> {
    ServiceBuilder::new()
        .layer(layer)
        .service(Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>())
}

fn get_req(url: &str) -> http::Request<Full<Bytes>> {
    http::Request::get(url)
        .body(Full::new(Bytes::new()))
        .unwrap()
}

fn budget(ms: u64) -> RequestBudget {
    RequestBudget::local(Duration::from_millis(ms), Profile::default().policy())
}

fn timeout_ms(headers: &HeaderMap) -> Option<u64> {
    headers
        .get("x-request-timeout-ms")
        .map(|v| v.to_str().unwrap().parse().unwrap())
}

// ---- item 1: the body is bounded, not only the head ----

#[tokio::test]
async fn tower_a_trickled_body_ends_at_the_budget_as_expired() {
    let url = trickling_server().await;
    let client = hyper_client(ClientBudgetLayer::new(Profile::default()));
    let start = Instant::now();
    let b = budget(300);
    let res = b.scope(client.oneshot(get_req(&url))).await.unwrap();
    assert_eq!(res.status(), 200, "the head arrives in time");
    let err = b.scope(res.into_body().collect()).await.unwrap_err();
    assert_eq!(
        BudgetError::find(&*err),
        Some(&BudgetError::Expired),
        "{err}"
    );
    assert!(start.elapsed() < LOOSE, "held for {:?}", start.elapsed());
}

#[tokio::test]
async fn tower_a_trickled_body_ends_as_cancelled_when_the_caller_goes_away() {
    let url = trickling_server().await;
    let client = hyper_client(ClientBudgetLayer::new(Profile::default()));
    let b = RequestBudget::local(Duration::from_secs(5), Profile::default().policy());
    let res = b.scope(client.oneshot(get_req(&url))).await.unwrap();
    let canceller = b.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        canceller.cancel();
    });
    let start = Instant::now();
    let err = res.into_body().collect().await.unwrap_err();
    assert_eq!(
        BudgetError::find(&*err),
        Some(&BudgetError::Cancelled),
        "{err}"
    );
    assert!(start.elapsed() < LOOSE, "held for {:?}", start.elapsed());
}

#[tokio::test]
async fn reqwest_a_trickled_body_ends_at_the_budget_as_expired() {
    let url = trickling_server().await;
    let client = crate::http_support::client(&Profile::default());
    let start = Instant::now();
    let b = budget(300);
    let res = client
        .get(&url)
        .with_extension(b.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "the head arrives in time");
    assert_eq!(res.url().as_str(), url, "the response keeps its URL");
    let err = res.bytes().await.unwrap_err();
    let err = reqwest_middleware::Error::Reqwest(err);
    assert_eq!(budget_error(&err), Some(&BudgetError::Expired), "{err:?}");
    assert!(start.elapsed() < LOOSE, "held for {:?}", start.elapsed());
}

#[tokio::test]
async fn reqwest_a_trickled_body_ends_as_cancelled_when_the_caller_goes_away() {
    let url = trickling_server().await;
    let client = crate::http_support::client(&Profile::default());
    let b = RequestBudget::local(Duration::from_secs(5), Profile::default().policy());
    let res = client
        .get(&url)
        .with_extension(b.clone())
        .send()
        .await
        .unwrap();
    let canceller = b.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        canceller.cancel();
    });
    let err = reqwest_middleware::Error::Reqwest(res.bytes().await.unwrap_err());
    assert_eq!(budget_error(&err), Some(&BudgetError::Cancelled), "{err:?}");
}

// ---- item 3: C16, the tighter deadline wins ----

#[tokio::test]
async fn tower_a_shorter_hand_set_timeout_wins_over_the_budget() {
    let (url, seen) = recording_server(Duration::from_secs(3)).await;
    let client = hyper_client(ClientBudgetLayer::new(Profile::default()));
    let mut req = get_req(&url);
    req.headers_mut()
        .insert("x-request-timeout-ms", "150".parse().unwrap());
    let start = Instant::now();
    let err = budget(5_000).scope(client.oneshot(req)).await.unwrap_err();
    assert_eq!(
        BudgetError::find(&*err),
        Some(&BudgetError::Expired),
        "{err}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    let told = timeout_ms(&seen.lock().unwrap()[0]).unwrap();
    assert!(
        told <= 150,
        "the callee is told the tighter value, got {told}"
    );
}

#[tokio::test]
async fn tower_a_longer_hand_set_timeout_never_extends_the_budget() {
    let (url, seen) = recording_server(Duration::from_secs(3)).await;
    let client = hyper_client(ClientBudgetLayer::new(Profile::default()));
    let mut req = get_req(&url);
    req.headers_mut()
        .insert("x-request-timeout-ms", "5000".parse().unwrap());
    let start = Instant::now();
    let err = budget(300).scope(client.oneshot(req)).await.unwrap_err();
    assert_eq!(
        BudgetError::find(&*err),
        Some(&BudgetError::Expired),
        "{err}"
    );
    assert!(start.elapsed() < LOOSE, "{:?}", start.elapsed());
    let told = timeout_ms(&seen.lock().unwrap()[0]).unwrap();
    assert!(told <= 294, "the budget wins: told {told}");
}

#[tokio::test]
async fn reqwest_a_shorter_per_call_timeout_wins_and_is_expired() {
    let (url, seen) = recording_server(Duration::from_secs(3)).await;
    let client = crate::http_support::client(&Profile::default());
    let start = Instant::now();
    let err = client
        .get(&url)
        .timeout(Duration::from_millis(150))
        .with_extension(budget(5_000))
        .send()
        .await
        .unwrap_err();
    assert_eq!(budget_error(&err), Some(&BudgetError::Expired), "{err:?}");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    let told = timeout_ms(&seen.lock().unwrap()[0]).unwrap();
    assert!(
        told <= 150,
        "the callee is told the tighter value, got {told}"
    );
}

#[tokio::test]
async fn reqwest_a_longer_per_call_timeout_never_extends_the_budget() {
    let (url, seen) = recording_server(Duration::from_secs(3)).await;
    let client = crate::http_support::client(&Profile::default());
    let start = Instant::now();
    let err = client
        .get(&url)
        .timeout(Duration::from_secs(5))
        .with_extension(budget(300))
        .send()
        .await
        .unwrap_err();
    assert_eq!(budget_error(&err), Some(&BudgetError::Expired), "{err:?}");
    assert!(start.elapsed() < LOOSE, "{:?}", start.elapsed());
    let told = timeout_ms(&seen.lock().unwrap()[0]).unwrap();
    assert!(told <= 294, "the budget wins: told {told}");
}

// ---- item 4: C19/S16, deadline headers only to trusted hosts ----

fn deadline_headers(h: &HeaderMap) -> Vec<String> {
    h.keys()
        .map(|k| k.as_str().to_owned())
        .filter(|k| {
            k.starts_with("x-deadline-")
                || k == "x-request-timeout-ms"
                || k == "x-request-deadline"
                || k == "grpc-timeout"
        })
        .collect()
}

#[tokio::test]
async fn tower_s16_an_untrusted_destination_sees_no_deadline_header() {
    let (url, seen) = recording_server(Duration::ZERO).await;
    let with_marker = || {
        let mut req = get_req(&url);
        req.headers_mut()
            .insert("x-deadline-outcome", "expired".parse().unwrap());
        req
    };
    // Loopback is trusted by default.
    let trusted = hyper_client(ClientBudgetLayer::new(Profile::default()));
    budget(500)
        .scope(trusted.oneshot(get_req(&url)))
        .await
        .unwrap();
    // The same server marked untrusted, by the layer and by the profile.
    let untrusted = hyper_client(ClientBudgetLayer::new(Profile::default()).untrusted());
    budget(500)
        .scope(untrusted.oneshot(with_marker()))
        .await
        .unwrap();
    let elsewhere =
        Profile::from_yaml("outbound: {trusted_hosts: ['*.corp.internal']}", "t").unwrap();
    let by_profile = hyper_client(ClientBudgetLayer::new(elsewhere.clone()));
    budget(500)
        .scope(by_profile.oneshot(with_marker()))
        .await
        .unwrap();
    // And `trust_all` overrides that profile.
    let vouched = hyper_client(ClientBudgetLayer::new(elsewhere).trust_all());
    budget(500)
        .scope(vouched.oneshot(get_req(&url)))
        .await
        .unwrap();

    let seen = seen.lock().unwrap();
    assert!(timeout_ms(&seen[0]).is_some_and(|ms| ms <= 494));
    assert_eq!(
        deadline_headers(&seen[1]),
        Vec::<String>::new(),
        "layer untrusted"
    );
    assert_eq!(
        deadline_headers(&seen[2]),
        Vec::<String>::new(),
        "profile untrusted"
    );
    assert!(timeout_ms(&seen[3]).is_some(), "trust_all");
}

#[tokio::test]
async fn tower_an_untrusted_call_is_still_bounded_by_the_budget() {
    let (url, seen) = recording_server(Duration::from_secs(3)).await;
    let client = hyper_client(ClientBudgetLayer::new(Profile::default()).untrusted());
    let start = Instant::now();
    let err = budget(300)
        .scope(client.oneshot(get_req(&url)))
        .await
        .unwrap_err();
    assert_eq!(
        BudgetError::find(&*err),
        Some(&BudgetError::Expired),
        "{err}"
    );
    assert!(start.elapsed() < LOOSE);
    assert_eq!(
        deadline_headers(&seen.lock().unwrap()[0]),
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn reqwest_s16_an_untrusted_destination_sees_no_deadline_header() {
    let (url, seen) = recording_server(Duration::ZERO).await;
    let plain = crate::http_support::client(&Profile::default());
    plain
        .get(&url)
        .with_extension(budget(500))
        .send()
        .await
        .unwrap();
    let third_party = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(BudgetMiddleware::new(Profile::default()).untrusted())
        .build();
    third_party
        .get(&url)
        .header("x-deadline-remaining-ms", "12")
        .timeout(Duration::from_secs(2))
        .with_extension(budget(500))
        .send()
        .await
        .unwrap();
    let seen = seen.lock().unwrap();
    assert!(
        timeout_ms(&seen[0]).is_some(),
        "loopback is trusted by default"
    );
    assert_eq!(deadline_headers(&seen[1]), Vec::<String>::new());
}

// ---- issue 32, item 1: trust is decided on where the call goes (C19, S16) ----

#[tokio::test]
async fn s16_a_request_to_a_loopback_egress_proxy_for_a_third_party_carries_no_deadline() {
    // An egress sidecar on loopback: the URI names 127.0.0.1, the `Host` header names the
    // third party the sidecar forwards to. The call goes to the third party.
    let (url, seen) = recording_server(Duration::ZERO).await;
    let client = hyper_client(ClientBudgetLayer::new(Profile::default()));
    let mut via_sidecar = get_req(&url);
    via_sidecar
        .headers_mut()
        .insert(http::header::HOST, "api.payments.example".parse().unwrap());
    budget(500)
        .scope(client.clone().oneshot(via_sidecar))
        .await
        .unwrap();
    // The same sidecar forwarding to an internal service.
    let mut internal = get_req(&url);
    internal
        .headers_mut()
        .insert(http::header::HOST, "tax.internal".parse().unwrap());
    budget(500).scope(client.oneshot(internal)).await.unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(
        deadline_headers(&seen[0]),
        Vec::<String>::new(),
        "the third party behind the sidecar learns no deadline"
    );
    assert!(timeout_ms(&seen[1]).is_some_and(|ms| ms <= 494));
}

#[tokio::test]
async fn s16_reqwest_behind_a_forward_proxy_judges_the_destination_not_the_proxy() {
    // `Proxy::http`: reqwest sends `GET http://api.payments.example/ HTTP/1.1` to the proxy
    // on loopback; the middleware sees the destination's URL, and that is what is judged. The
    // recording server stands in for the proxy and records what it was sent.
    let (proxy_url, seen) = recording_server(Duration::ZERO).await;
    let proxied = reqwest::Client::builder()
        .proxy(reqwest::Proxy::http(&proxy_url).unwrap())
        .build()
        .unwrap();
    let client = reqwest_middleware::ClientBuilder::new(proxied)
        .with(BudgetMiddleware::new(Profile::default()))
        .build();
    for url in ["http://api.payments.example/", "http://tax.internal/"] {
        let res = client
            .get(url)
            .with_extension(budget(500))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2, "both calls reached the proxy");
    assert_eq!(
        deadline_headers(&seen[0]),
        Vec::<String>::new(),
        "through the proxy to a third party"
    );
    assert!(
        timeout_ms(&seen[1]).is_some_and(|ms| ms <= 494),
        "through the proxy to an internal host"
    );
}

// ---- issue 32, item 4: one reading of a late `cancelled` (C4) ----

/// A server that waits until the deadline it was told has passed, then answers 499 marked
/// `cancelled`: as a callee that saw its caller leave right at the deadline answers.
async fn late_cancelling_server() -> String {
    let url = serve(Router::new().route(
        "/",
        get(|headers: HeaderMap| async move {
            let told = timeout_ms(&headers).unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(told + 1)).await;
            (
                http::StatusCode::from_u16(499).unwrap(),
                [("x-deadline-outcome", "cancelled")],
                "cancelled",
            )
        }),
    ))
    .await;
    format!("{url}/")
}

#[tokio::test]
async fn a_cancelled_answer_after_the_callees_deadline_is_expiry_in_both_http_clients() {
    let url = late_cancelling_server().await;
    // A 100 ms transit allowance: the callee is told 500 - 5 - 100 = 395 ms, this hop waits
    // until 495 ms, so the callee's answer at ~396 ms arrives after its deadline and well
    // inside the wait: only the reading of the answer can make it an expiry.
    let roomy = Profile::from_yaml("transit_allowance_ms: 100", "roomy.yaml").unwrap();
    let b = || RequestBudget::local(Duration::from_millis(500), roomy.policy());
    let tower = hyper_client(ClientBudgetLayer::new(roomy.clone()));
    let err = b().scope(tower.oneshot(get_req(&url))).await.unwrap_err();
    assert_eq!(
        BudgetError::find(&*err),
        Some(&BudgetError::Expired),
        "{err}"
    );
    let reqwest = crate::http_support::client(&roomy);
    let err = reqwest
        .get(&url)
        .with_extension(b())
        .send()
        .await
        .unwrap_err();
    assert_eq!(budget_error(&err), Some(&BudgetError::Expired), "{err}");
}

#[tokio::test]
async fn a_cancelled_answer_while_the_callee_had_time_stays_cancelled() {
    let url = serve(Router::new().route(
        "/",
        get(|| async {
            (
                http::StatusCode::from_u16(499).unwrap(),
                [("x-deadline-outcome", "cancelled")],
                "cancelled",
            )
        }),
    ))
    .await;
    let tower = hyper_client(ClientBudgetLayer::new(Profile::default()));
    let err = budget(2_000)
        .scope(tower.oneshot(get_req(&format!("{url}/"))))
        .await
        .unwrap_err();
    assert_eq!(BudgetError::find(&*err), Some(&BudgetError::Cancelled));
}
