//! Multi-hop behaviour over real sockets: axum servers on 127.0.0.1:0 behind
//! `ServerBudgetLayer`, calling each other through reqwest with `BudgetMiddleware`.
//!
//! Real time, real I/O: bounds are generous and nothing asserts on speed except the
//! contract's own "bounded by the budget plus a small epsilon" (S1), with a wide epsilon.
#![cfg(all(feature = "axum", feature = "reqwest"))]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::http_support::{Live, client, eventually, fail, profile, serve};
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use hopbudget::http::reqwest::budget_error;
use hopbudget::http::server::ServerBudgetLayer;
use hopbudget::{BudgetError, EndCause, Profile, RequestBudget};
use reqwest_middleware::RequestBuilder;

fn with_budget(req: RequestBuilder, ms: u64, profile: &Profile) -> RequestBuilder {
    req.with_extension(RequestBudget::local(
        Duration::from_millis(ms),
        profile.policy(),
    ))
}

/// C2: a 4-hop chain where each hop reports the budget it received.
#[tokio::test]
async fn four_hop_chain_budgets_strictly_decrease_by_at_least_the_margin() {
    let p = profile("service: chain\nhop_margin_ms: 20\ntransit_allowance_ms: 2");
    let mut next: Option<String> = None;
    for _ in 0..4 {
        let downstream = next.clone();
        let http = client(&p);
        let router = Router::new()
            .route(
                "/hop",
                get(move |budget: RequestBudget| {
                    let downstream = downstream.clone();
                    let http = http.clone();
                    async move {
                        let mine = budget.at_arrival().as_millis().to_string();
                        let Some(url) = downstream else {
                            return (StatusCode::OK, mine);
                        };
                        match http.get(format!("{url}/hop")).send().await {
                            Ok(res) => (
                                StatusCode::OK,
                                format!("{mine},{}", res.text().await.unwrap()),
                            ),
                            Err(e) => fail(&e),
                        }
                    }
                }),
            )
            .layer(ServerBudgetLayer::new(p.clone()));
        next = Some(serve(router).await);
    }
    let entry = next.unwrap();
    let res = reqwest::Client::new()
        .get(format!("{entry}/hop"))
        .header("x-request-timeout-ms", "2000")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let budgets: Vec<u64> = res
        .text()
        .await
        .unwrap()
        .split(',')
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(budgets.len(), 4, "{budgets:?}");
    assert!(budgets[0] <= 2000 && budgets[0] >= 1990, "{budgets:?}");
    for pair in budgets.windows(2) {
        assert!(
            pair[0] >= pair[1] + 20,
            "each hop forwards less than it has by at least the margin: {budgets:?}"
        );
    }
}

/// Router for one S1 hop: `work` of its own, then the next hop, behind the server layer and
/// calling through the client middleware. Each hop notes when it started its own work.
fn s1_hop(next: Option<String>, work: Duration, p: &Profile, starts: Starts) -> Router {
    let http = client(p);
    Router::new()
        .route(
            "/",
            get(move || {
                let (next, http, starts) = (next.clone(), http.clone(), starts.clone());
                async move {
                    starts.lock().unwrap().push(tokio::time::Instant::now());
                    tokio::time::sleep(work).await;
                    let Some(url) = next else {
                        return (StatusCode::OK, "leaf".to_owned());
                    };
                    match http.get(&url).send().await {
                        Ok(res) => (res.status(), res.text().await.unwrap_or_default()),
                        Err(e) => fail(&e),
                    }
                }
            }),
        )
        .layer(ServerBudgetLayer::new(p.clone()))
}

type Starts = Arc<Mutex<Vec<tokio::time::Instant>>>;

/// gateway -> checkout -> pricing -> tax -> currency, each doing 300 ms of work first.
async fn s1_chain(p: &Profile) -> (String, Starts) {
    let starts = Starts::default();
    let mut next = None;
    for _ in 0..5 {
        let hop = s1_hop(next, Duration::from_millis(300), p, starts.clone());
        next = Some(serve(hop).await);
    }
    (next.unwrap(), starts)
}

/// S1: fresh per-hop timeouts add up; propagation caps the client's wait at its budget, and
/// no hop starts work after the client's deadline.
///
/// Both chains run the same library stack. In the first every hop ignores the inbound
/// deadline (`inbound: []`), so each starts a fresh 2 s budget of its own (the profile's edge
/// total, C8): the timeouts of the incident. In the second the deadline propagates.
#[tokio::test]
async fn s1_per_hop_timeouts_sum_while_propagation_caps_the_wait() {
    let budget = Duration::from_millis(500);
    let after_deadline = |starts: &Starts, sent: tokio::time::Instant| {
        let starts = starts.lock().unwrap();
        starts.iter().filter(|t| **t > sent + budget).count()
    };

    let fresh = profile("service: s1\ninbound: []\nedge_total_ms: 2000");
    let (url, starts) = s1_chain(&fresh).await;
    let sent = tokio::time::Instant::now();
    // The client asks for 500 ms; every hop ignores it and starts its own 2 s.
    let res = reqwest::Client::new()
        .get(&url)
        .header("x-request-timeout-ms", "500")
        .send()
        .await
        .unwrap();
    let fresh_wait = sent.elapsed();
    assert_eq!(res.status(), 200);
    assert!(
        fresh_wait >= Duration::from_millis(1500),
        "five 300 ms hops, each inside its own fresh 2 s, add up to {fresh_wait:?}"
    );
    assert!(
        after_deadline(&starts, sent) >= 3,
        "hops went on starting work for a client whose 500 ms were long gone"
    );

    let propagated = profile("service: s1");
    let (url, starts) = s1_chain(&propagated).await;
    // The same plain client, which would wait for ever: the chain itself answers in time.
    let sent = tokio::time::Instant::now();
    let res = reqwest::Client::new()
        .get(&url)
        .header("x-request-timeout-ms", "500")
        .send()
        .await
        .unwrap();
    let wait = sent.elapsed();
    let epsilon = Duration::from_millis(400);
    assert!(
        wait <= budget + epsilon,
        "with propagation the wait is bounded by the budget: {wait:?}"
    );
    assert_eq!(
        res.status(),
        504,
        "the chain needs 1.5 s; the budget is 500 ms"
    );
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(
        after_deadline(&starts, sent),
        0,
        "no hop starts work after the client's deadline: {:?}",
        starts.lock().unwrap().len()
    );
}

/// S4: a callee that uses all the time it was told finishes too late for a caller without
/// margin, and in time for a caller with one. "In time" means the caller still has the
/// 20 ms it needs to finish its own answer.
#[tokio::test]
async fn s4_the_hop_margin_leaves_the_caller_time_for_the_answer() {
    const CALLER_NEEDS: Duration = Duration::from_millis(20);
    // The callee spends exactly the budget in the header (no layer: it just obeys it), and
    // notes what it was told.
    let told = Arc::new(Mutex::new(Vec::<u64>::new()));
    let callee = serve(Router::new().route(
        "/",
        get({
            let told = told.clone();
            move |headers: axum::http::HeaderMap| async move {
                let ms: u64 = headers["x-request-timeout-ms"]
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                told.lock().unwrap().push(ms);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                "done"
            }
        }),
    ))
    .await;
    let run = |margin_ms: u64, transit_ms: u64| {
        let callee = callee.clone();
        async move {
            let p = profile(&format!(
                "service: s4\nhop_margin_ms: {margin_ms}\ntransit_allowance_ms: {transit_ms}\nrefuse_below_ms: 1"
            ));
            let caller = RequestBudget::local(Duration::from_millis(600), p.policy());
            let res = client(&p)
                .get(&callee)
                .with_extension(caller.clone())
                .send()
                .await;
            match res {
                Ok(res) => {
                    assert_eq!(res.status(), 200);
                    Ok(caller.remaining())
                }
                Err(e) => Err(*budget_error(&e).expect("a deadline outcome")),
            }
        }
    };
    // No margin: the callee is told everything the caller has, so its answer comes at (or
    // after) the caller's own deadline.
    match run(0, 0).await {
        Err(e) => assert_eq!(e, BudgetError::Expired),
        Ok(left) => assert!(left < CALLER_NEEDS, "no margin left {left:?}"),
    }
    let no_margin = told.lock().unwrap()[0];
    assert!(no_margin >= 590, "told {no_margin} ms of the caller's 600");
    // A 250 ms margin and a 100 ms transit allowance: the callee is told 250 ms, the caller
    // waits until 350 ms, so the answer has 100 ms to travel back even on a busy machine, and
    // the caller has the answer with time to finish.
    let left = run(250, 100).await.expect("answer in time");
    assert!(left >= CALLER_NEEDS, "caller had only {left:?}");
    let with_margin = told.lock().unwrap()[1];
    assert!(
        (240..=250).contains(&with_margin),
        "told 600 - 250 - 100 ms, rounded down: {with_margin}"
    );
}

#[derive(Clone, Default)]
struct Seen {
    causes: Arc<Mutex<Vec<(&'static str, EndCause)>>>,
    live: Live,
}

impl Seen {
    /// Start a unit of live work under the ambient budget, and record how the budget ends.
    fn track(&self, name: &'static str, budget: &RequestBudget) {
        let live = self.live.clone();
        hopbudget::spawn(async move {
            let _guard = live.enter();
            std::future::pending::<()>().await;
        });
        let causes = self.causes.clone();
        let budget = budget.clone();
        tokio::spawn(async move {
            let cause = budget.done().await;
            causes.lock().unwrap().push((name, cause));
        });
    }
    fn cause(&self, name: &str) -> Option<EndCause> {
        self.causes
            .lock()
            .unwrap()
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, c)| *c)
    }
}

/// Two hops, `front` calling `back`; `back` works for 10 s.
async fn two_hops(p: &Profile, seen: &Seen) -> String {
    let back = serve(
        Router::new()
            .route(
                "/",
                get(
                    |State(seen): State<Seen>, budget: RequestBudget| async move {
                        seen.track("back", &budget);
                        tokio::time::sleep(Duration::from_secs(10)).await;
                        "slow"
                    },
                ),
            )
            .layer(ServerBudgetLayer::new(p.clone()))
            .with_state(seen.clone()),
    )
    .await;
    let http = client(p);
    serve(
        Router::new()
            .route(
                "/",
                get(move |State(seen): State<Seen>, budget: RequestBudget| {
                    let (http, back) = (http.clone(), back.clone());
                    async move {
                        seen.track("front", &budget);
                        match http.get(&back).send().await {
                            Ok(res) => (res.status(), String::new()).into_response(),
                            Err(e) => {
                                let outcome = budget_error(&e).copied();
                                let mut res = fail(&e).into_response();
                                res.extensions_mut().insert(outcome);
                                res
                            }
                        }
                    }
                }),
            )
            .layer(ServerBudgetLayer::new(p.clone()))
            .with_state(seen.clone()),
    )
    .await
}

/// C4: the budget runs out inside `back`: expired there and expired (not cancelled) at `front`.
#[tokio::test]
async fn expiry_mid_hop_is_expired_at_that_hop_and_at_its_caller() {
    let p = profile("service: expiry");
    let seen = Seen::default();
    let front = two_hops(&p, &seen).await;
    let res = reqwest::Client::new()
        .get(&front)
        .header("x-request-timeout-ms", "300")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 504, "{}", res.text().await.unwrap());
    assert!(
        eventually(Duration::from_secs(1), || seen.cause("back").is_some()
            && seen.cause("front").is_some())
        .await
    );
    assert_eq!(seen.cause("back"), Some(EndCause::Expired));
    assert_eq!(seen.cause("front"), Some(EndCause::Expired));
    assert!(
        eventually(Duration::from_secs(1), || seen.live.get() == 0).await,
        "expiry stops the work too (C7): {} units still live",
        seen.live.get()
    );
}

/// C4 over the wire: a downstream that answers with its expiry status is expired here.
#[tokio::test]
async fn a_downstream_504_is_classified_expired() {
    let p = profile("service: classify");
    let down = serve(
        Router::new()
            .route(
                "/",
                get(|| async { (StatusCode::GATEWAY_TIMEOUT, "out of time") }),
            )
            .layer(ServerBudgetLayer::new(p.clone())),
    )
    .await;
    let err = with_budget(client(&p).get(&down), 1000, &p)
        .send()
        .await
        .unwrap_err();
    assert_eq!(budget_error(&err), Some(&BudgetError::Expired));
}

/// C5: the client gives up; both hops see cancelled and their work stops.
#[tokio::test]
async fn client_abort_cancels_every_hop_and_their_work_stops() {
    let p = profile("service: abort");
    let seen = Seen::default();
    let front = two_hops(&p, &seen).await;
    let budget = RequestBudget::local(Duration::from_secs(5), p.policy());
    let call = tokio::spawn(client(&p).get(&front).with_extension(budget.clone()).send());
    assert!(
        eventually(Duration::from_secs(2), || seen.live.get() == 2).await,
        "both hops started work"
    );
    budget.cancel(); // the user closed the tab
    let err = call.await.unwrap().unwrap_err();
    assert_eq!(budget_error(&err), Some(&BudgetError::Cancelled));
    assert!(
        eventually(Duration::from_secs(1), || seen.live.get() == 0).await,
        "{} units of work still live after the client left",
        seen.live.get()
    );
    assert!(eventually(Duration::from_secs(1), || seen.cause("back").is_some()).await);
    assert_eq!(seen.cause("front"), Some(EndCause::Cancelled));
    assert_eq!(seen.cause("back"), Some(EndCause::Cancelled));
}
