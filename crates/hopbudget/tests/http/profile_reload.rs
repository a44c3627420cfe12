//! Backing out while the service runs (C24): a profile replaced under running axum and tonic
//! servers applies to the next request; the kill switch stops refusals and deadline cuts while
//! the budget is still forwarded to the next hop and every hop is recorded with what
//! enforcement would have done; a profile that does not validate is refused and the running
//! one kept.
#![cfg(all(feature = "axum", feature = "reqwest", feature = "grpc"))]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::http_support::{client, profile, serve};
use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use hopbudget::http::server::ServerBudgetLayer;
use hopbudget::{Profile, RequestBudget, SharedProfile};
use hopbudget_testkit::HOP_CALL_PATH;
use hopbudget_testkit::hops::{HopCapture, HopRecord};

/// What the callee below saw of the deadline: the `x-request-timeout-ms` of each call.
type Seen = Arc<Mutex<Vec<Option<u64>>>>;

/// A plain axum service (no hopbudget) that notes the deadline header each call carried.
async fn ledger(seen: Seen) -> String {
    serve(Router::new().route(
        "/",
        get(move |headers: HeaderMap| async move {
            let ms = headers
                .get("x-request-timeout-ms")
                .and_then(|v| v.to_str().ok()?.parse().ok());
            seen.lock().unwrap().push(ms);
            "noted"
        }),
    ))
    .await
}

/// The service under test, behind a server layer built from `shared`:
/// - `/quote` needs 200 ms (the profile's route rule) and answers at once;
/// - `/slow` works 100 ms, then calls the ledger through the budget middleware;
/// - `/late` works 300 ms.
async fn service(shared: &SharedProfile, ledger_url: String) -> String {
    let http = client(&shared.current());
    serve(
        Router::new()
            .route("/quote", get(|| async { "quoted" }))
            .route(
                "/slow",
                get(move || {
                    let (http, url) = (http.clone(), ledger_url.clone());
                    async move {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        match http.get(url).send().await {
                            Ok(res) => (StatusCode::OK, res.text().await.unwrap()),
                            Err(e) => crate::http_support::fail(&e),
                        }
                    }
                }),
            )
            .route(
                "/late",
                get(|budget: RequestBudget| async move {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    format!("done, budget ended: {:?}", budget.end_cause())
                }),
            )
            .layer(ServerBudgetLayer::new(shared.clone())),
    )
    .await
}

async fn call_with(url: &str, budget_ms: u64) -> (StatusCode, String) {
    let res = reqwest::Client::new()
        .get(url)
        .header("x-request-timeout-ms", budget_ms.to_string())
        .send()
        .await
        .unwrap();
    (res.status(), res.text().await.unwrap())
}

const STRICT: &str = "service: quotes\nroutes: [{path: /quote, min_budget_ms: 200}]\n";

async fn hop_on(hops: &HopCapture, route: &'static str, nth: usize) -> HopRecord {
    tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let on: Vec<_> = hops
                .hops()
                .into_iter()
                .filter(|h| h.route == route)
                .collect();
            if on.len() > nth {
                return on[nth].clone();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no hop {nth} on {route}: {:?}", hops.hops()))
}

#[tokio::test]
async fn a_replaced_profile_applies_to_the_next_request_without_a_restart() {
    let shared = SharedProfile::new(profile(STRICT));
    let url = service(&shared, ledger(Seen::default()).await).await;
    let quote = format!("{url}/quote");

    assert_eq!(
        call_with(&quote, 100).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    // The threshold was wrong: 50 ms is enough for a quote.
    shared.replace(profile(
        "service: quotes\nroutes: [{path: /quote, min_budget_ms: 50}]\n",
    ));
    assert_eq!(
        call_with(&quote, 100).await,
        (StatusCode::OK, "quoted".into())
    );
    // And back.
    shared.replace(profile(STRICT));
    assert_eq!(
        call_with(&quote, 100).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
}

#[tokio::test]
async fn with_enforcement_off_nothing_is_refused_or_cut_and_the_budget_still_goes_forward() {
    let hops = HopCapture::new();
    let _capture = hops.install();
    let seen = Seen::default();
    let shared = SharedProfile::new(profile(STRICT));
    let url = service(&shared, ledger(seen.clone()).await).await;

    // Enforced: refused before work (C3), and cut at the deadline (C7).
    assert_eq!(call_with(&format!("{url}/quote"), 100).await.0, 503);
    assert_eq!(call_with(&format!("{url}/late"), 150).await.0, 504);
    assert_eq!(hop_on(&hops, "/quote", 0).await.outcome, "refused");
    assert_eq!(hop_on(&hops, "/late", 0).await.outcome, "expired");

    shared.set_enforcing(false);

    // The refusal is let through, and recorded as what enforcement would have done.
    assert_eq!(
        call_with(&format!("{url}/quote"), 100).await,
        (StatusCode::OK, "quoted".into())
    );
    let quote = hop_on(&hops, "/quote", 1).await;
    assert_eq!(
        (quote.outcome.as_str(), quote.unenforced.as_str()),
        ("completed", "refused"),
        "{quote:?}"
    );
    assert_eq!(quote.required_ms, Some(200));
    assert!(quote.remaining_ms.is_some_and(|ms| ms <= 100), "{quote:?}");

    // The handler runs past its deadline to its end; its budget did not end under it.
    let (status, body) = call_with(&format!("{url}/late"), 150).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, "done, budget ended: None")
    );
    let late = hop_on(&hops, "/late", 1).await;
    assert_eq!(
        (late.outcome.as_str(), late.unenforced.as_str()),
        ("completed", "expired"),
        "{late:?}"
    );

    // Forwarded: after 100 ms of work on a 400 ms budget the ledger is told what is left,
    // less the hop margin and transit (C2).
    let (status, body) = call_with(&format!("{url}/slow"), 400).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "noted"));
    let told = seen.lock().unwrap()[0].expect("the ledger was told a deadline");
    assert!((1..=294).contains(&told), "told {told} ms");
    // A budget too short for the work is not refused downstream either: it goes on with
    // what is left, zero, so that a callee that enforces sees it spent.
    let (status, _) = call_with(&format!("{url}/slow"), 60).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(seen.lock().unwrap()[1], Some(0));

    // The switch back on enforces again, on the same server.
    shared.set_enforcing(true);
    assert_eq!(call_with(&format!("{url}/quote"), 100).await.0, 503);
}

#[tokio::test]
async fn a_profile_that_does_not_validate_is_refused_and_the_running_one_kept() {
    let dir = std::env::temp_dir().join(format!("hopbudget-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("quotes.yaml");
    std::fs::write(&file, STRICT).unwrap();
    let shared = SharedProfile::new(Profile::load(&file).unwrap());
    let url = service(&shared, ledger(Seen::default()).await).await;
    let quote = format!("{url}/quote");

    // A typo while lowering the threshold: every problem named, by field.
    std::fs::write(
        &file,
        "service: quotes\nenforce: flase\nroutes: [{path: /quote, min_budget_ms: -50}]\n",
    )
    .unwrap();
    let err = shared.reload(&file).unwrap_err();
    let text = err.to_string();
    assert!(text.contains(&file.display().to_string()), "{text}");
    assert!(text.contains("enforce"), "{text}");
    // The running profile still refuses as before.
    assert_eq!(
        call_with(&quote, 100).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );

    // Mended, it is taken.
    std::fs::write(
        &file,
        "service: quotes\nenforce: false\nroutes: [{path: /quote, min_budget_ms: 200}]\n",
    )
    .unwrap();
    assert!(!shared.reload(&file).unwrap().enforces());
    assert_eq!(call_with(&quote, 100).await.0, StatusCode::OK);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_tonic_service_follows_the_switch_through_a_real_channel() {
    use crate::grpc_support::{HopHandler, budget, call, grpc_client, serve_with_layer};
    use hopbudget::grpc::server::GrpcServerLayer;

    let shared = SharedProfile::new(
        Profile::from_yaml(
            &format!("service: tax\nroutes: [{{path: {HOP_CALL_PATH}, min_budget_ms: 200}}]\n"),
            "tax.yaml",
        )
        .unwrap(),
    );
    let handler = HopHandler::new(shared.current().as_ref().clone());
    let server = serve_with_layer(handler, GrpcServerLayer::new(shared.clone())).await;
    let stats = server.stats.clone();
    let mut client = grpc_client(&Profile::default(), &server.url());

    let status = budget(120)
        .scope(client.call(call(&[], 0)))
        .await
        .expect_err("refused while enforced");
    assert_eq!(
        hopbudget::grpc::outcome(&status),
        Some(hopbudget::Outcome::Refused)
    );
    assert_eq!(stats.entered(), 0);

    shared.set_enforcing(false);
    budget(120)
        .scope(client.call(call(&[], 0)))
        .await
        .expect("let through with enforcement off");
    assert_eq!(stats.entered(), 1);
}

/// A call keeps the profile it arrived under to its end: a swap while it runs does not
/// respell its expiry (the new profile's codes apply to the next call). Raw HTTP/2 calls, so
/// no client gives up first and the server's own answer is read.
#[tokio::test]
async fn a_running_grpc_call_is_answered_with_the_codes_it_arrived_under() {
    use crate::grpc_support::{HopHandler, call, raw_call, serve_with_layer};
    use hopbudget::grpc::server::GrpcServerLayer;

    let shared = SharedProfile::new(Profile::default().with_service("tax"));
    let handler = HopHandler::new(shared.current().as_ref().clone());
    let server = serve_with_layer(handler, GrpcServerLayer::new(shared.clone())).await;
    // 150 ms of budget for 400 ms of work.
    let (addr, timeout, work) = (server.addr, [("grpc-timeout", "150m")], call(&[], 400));

    let running = tokio::spawn({
        let work = work.clone();
        async move { raw_call(addr, &timeout, &work).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The profile changes while the call runs.
    shared.replace(
        Profile::from_yaml(
            "service: tax\nstatus: {grpc: {expired: UNAVAILABLE}}\n",
            "t.yaml",
        )
        .unwrap(),
    );
    let answered = running.await.unwrap();
    // DEADLINE_EXCEEDED is 4; UNAVAILABLE is 14.
    assert_eq!(
        answered.grpc_status.as_deref(),
        Some("4"),
        "{:?}",
        answered.grpc_message
    );

    // The next call is spelled by the new profile.
    let answered = raw_call(addr, &timeout, &work).await;
    assert_eq!(
        answered.grpc_status.as_deref(),
        Some("14"),
        "{:?}",
        answered.grpc_message
    );
}
