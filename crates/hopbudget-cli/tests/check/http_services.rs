//! `hopbudget check` (issue #47) against real services on loopback: a service on the
//! library's own layers passes every rule; a forgetful one (a fresh 5 s timeout, no deadline
//! forwarded) fails C2 and C8 and the scorecard names the timeout it made up; bad input
//! (an unreachable target, a downstream address in use, a service that never calls the
//! downstream, a target that is not HTTP) exits 2.
//!
//! One file on purpose, over 500 lines: the tests share the services built here (the library's, the
//! forgetful one, the home-made middleware).

use crate::support::proxy;
use crate::support::proxy::serve;
use crate::support::serial::CHECK;

use std::net::SocketAddr;
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use hopbudget::http::reqwest::BudgetMiddleware;
use hopbudget::http::server::ServerBudgetLayer;
use hopbudget::{DownstreamError, Profile};
use hopbudget_cli::check::scorecard::{Scorecard, Verdict};
use hopbudget_cli::check::{self, CheckArgs};
use reqwest_middleware::ClientBuilder;

/// A port free a moment ago: the service must know its downstream before the checker
/// listens there.
fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// A service on the library's layers: `ServerBudgetLayer` in, `BudgetMiddleware` out, the
/// downstream's failure handed on with `?` (so a deadline's end is the library's 504).
async fn library_service(downstream: SocketAddr) -> SocketAddr {
    let profile = Profile::default().with_service("checked");
    let http = ClientBuilder::new(reqwest::Client::new())
        .with(BudgetMiddleware::new(profile.clone()))
        .build();
    let router = Router::new()
        .route(
            "/work",
            get(move || {
                let http = http.clone();
                async move {
                    let answer = http.get(format!("http://{downstream}/dep")).send().await?;
                    Ok::<_, DownstreamError>(answer.status().as_u16().to_string())
                }
            }),
        )
        .layer(ServerBudgetLayer::new(profile));
    serve(router).await
}

/// The same service, but its handler swallows the downstream's failure and answers 200: it
/// breaks C4 (no 504 at the deadline) and C3 (its client's local refusal becomes a 200).
async fn swallowing_service(downstream: SocketAddr) -> SocketAddr {
    let profile = Profile::default().with_service("checked");
    let http = ClientBuilder::new(reqwest::Client::new())
        .with(BudgetMiddleware::new(profile.clone()))
        .build();
    let router = Router::new()
        .route(
            "/work",
            get(move || {
                let http = http.clone();
                async move {
                    match http.get(format!("http://{downstream}/dep")).send().await {
                        Ok(answer) => answer.status().as_u16().to_string(),
                        Err(e) => format!("downstream failed: {e}"),
                    }
                }
            }),
        )
        .layer(ServerBudgetLayer::new(profile));
    serve(router).await
}

/// A forgetful service: calls its downstream with a fresh 5 s timeout of its own and
/// forwards no deadline (what a `context.Background()` does in Go). `detached`: the call runs
/// in a task of its own, which a caller leaving does not cancel (breaks C5).
async fn forgetful_service(downstream: SocketAddr, detached: bool) -> SocketAddr {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let router = Router::new().route(
        "/work",
        get(move || {
            let http = http.clone();
            let call = async move {
                match http.get(format!("http://{downstream}/dep")).send().await {
                    Ok(answer) => answer.status().as_u16().to_string(),
                    Err(e) => format!("downstream failed: {e}"),
                }
            };
            async move {
                if detached {
                    tokio::spawn(call).await.unwrap()
                } else {
                    call.await
                }
            }
        }),
    );
    serve(router).await
}

fn args(target: SocketAddr, downstream: SocketAddr) -> CheckArgs {
    CheckArgs {
        target: format!("http://{target}/work"),
        downstream,
        route: None,
        min_budget: None,
        third_party: None,
        grpc: None,
        json: false,
    }
}

fn verdict(card: &Scorecard, rule: &str) -> Verdict {
    card.line(rule)
        .unwrap_or_else(|| panic!("no {rule} line in\n{}", card.text()))
        .verdict
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_on_the_librarys_layers_passes_every_rule() {
    let _serial = CHECK.lock().await;
    let downstream = free_addr();
    let service = library_service(downstream).await;
    let card = check::check(&args(service, downstream)).await.unwrap();
    let text = card.text();
    println!("{text}");
    for line in &card.lines {
        let expected = if ["C1-step", "C19"].contains(&line.rule) {
            Verdict::NotApplicable
        } else {
            Verdict::Pass
        };
        assert_eq!(line.verdict, expected, "{}:\n{text}", line.rule);
    }
    assert!(!card.failed());
    // C8 reports the edge default the service told its downstream: the profile's 1000 ms,
    // less the margin.
    assert!(
        card.line("C8")
            .unwrap()
            .observed
            .contains(" ms (the edge default)"),
        "{text}"
    );
    // C2 reports the margin it observed.
    assert!(
        card.line("C2").unwrap().observed.contains("a margin of"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgetful_service_fails_c2_and_c8_and_the_card_names_its_fresh_default() {
    let _serial = CHECK.lock().await;
    let downstream = free_addr();
    let service = forgetful_service(downstream, false).await;
    let card = check::check(&args(service, downstream)).await.unwrap();
    let text = card.text();
    println!("{text}");
    assert!(card.failed(), "{text}");
    for rule in ["C2", "C8"] {
        assert_eq!(verdict(&card, rule), Verdict::Fail, "{rule}:\n{text}");
        let observed = &card.line(rule).unwrap().observed;
        assert!(
            observed.contains("no deadline reached the downstream"),
            "{text}"
        );
        // The fresh 5 s timeout, measured as the time it held the downstream before hanging up.
        let ms: u64 = observed
            .split("hung up on it after ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no hang-up time in {observed:?}"));
        assert!((4_500..=6_000).contains(&ms), "{text}");
    }
}

fn hopbudget(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hopbudget"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_unreachable_target_is_bad_input() {
    let (target, downstream) = (free_addr(), free_addr());
    let (code, _, err) = hopbudget(&[
        "check",
        "--target",
        &format!("http://{target}/"),
        "--downstream",
        &downstream.to_string(),
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("unreachable"), "{err}");
}

#[test]
fn a_downstream_address_in_use_is_bad_input() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let downstream = taken.local_addr().unwrap();
    let (code, _, err) = hopbudget(&[
        "check",
        "--target",
        "http://127.0.0.1:9/",
        "--downstream",
        &downstream.to_string(),
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "cannot listen on the downstream address {downstream}"
        )),
        "{err}"
    );
}

#[test]
fn a_target_that_is_not_http_is_bad_input() {
    // Answers every connection with a line of its own protocol.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let target = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        use std::io::Write;
        for mut stream in listener.incoming().flatten() {
            let _ = stream.write_all(b"+OK redis-like hello\r\n");
        }
    });
    let (code, _, err) = hopbudget(&[
        "check",
        "--target",
        &format!("http://{target}/"),
        "--downstream",
        &free_addr().to_string(),
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("answers nothing like HTTP"), "{err}");
}

#[test]
fn a_target_that_accepts_and_says_nothing_is_bad_input() {
    // Accepts every connection and holds it, silent.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let target = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    let (code, _, err) = hopbudget(&[
        "check",
        "--target",
        &format!("http://{target}/"),
        "--downstream",
        &free_addr().to_string(),
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("answered nothing within"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_that_never_calls_the_downstream_is_misconfigured_not_passing() {
    let service = serve(Router::new().route("/work", get(|| async { "ok" }))).await;
    let err = check::check(&args(service, free_addr())).await.unwrap_err();
    assert!(err.contains("never called the downstream"), "{err}");
}

#[test]
fn bad_arguments_are_named() {
    let (code, _, err) = hopbudget(&[
        "check",
        "--target",
        "ftp://127.0.0.1:1/",
        "--downstream",
        "127.0.0.1:0",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--target") && err.contains("ftp"), "{err}");
}

/// One way a home-made middleware can break a rule; `None` keeps every rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flaw {
    None,
    /// Subtracts the age the `Date` header claims (C1).
    TrustsDate,
    /// Forwards the budget it was given, not what is left of it (C2).
    NoMargin,
    /// Forwards any budget, however large (C9).
    NoClamp,
    /// Reads only `x-request-timeout-ms` (tightest).
    OneCarrier,
    /// Reads a malformed header as no deadline (malformed).
    Lenient,
    /// Answers a deadline's end with 429 (C10).
    TooMany,
    /// No refuse threshold: calls the downstream with whatever is left (C3).
    NoThreshold,
    /// Calls again when the downstream answers 5xx, even an expired one (C6).
    Retries,
    /// Calls again when the downstream answers 499, cancelled (C6's second half).
    RetriesCancelled,
    /// Tells the third party it also calls its deadline (C19).
    TellsThirdParty,
}

/// A hand-rolled deadline middleware, as a team without the library would write it: reads
/// `x-request-timeout-ms` and Envoy's header (the tightest wins), 400 on a malformed one,
/// 1000 ms when none, clamped to 30 s, 503 with `Retry-After` under 10 ms, and calls the
/// downstream with what is left less 5 ms (504 when it runs out). `flaw` breaks one rule.
/// It also calls a third party, `third`, first, with no deadline (unless the flaw is to).
async fn home_made_service(downstream: SocketAddr, third: SocketAddr, flaw: Flaw) -> SocketAddr {
    let http = reqwest::Client::new();
    let router = Router::new().route(
        "/work",
        get(move |headers: axum::http::HeaderMap| {
            let http = http.clone();
            async move { home_made(http, (downstream, third), flaw, headers).await }
        }),
    );
    serve(router).await
}

async fn home_made(
    http: reqwest::Client,
    (downstream, third): (SocketAddr, SocketAddr),
    flaw: Flaw,
    headers: axum::http::HeaderMap,
) -> axum::response::Response {
    use axum::http::StatusCode;
    let start = std::time::Instant::now();
    let mut carriers = vec!["x-request-timeout-ms"];
    if flaw != Flaw::OneCarrier {
        carriers.push("x-envoy-expected-rq-timeout-ms");
    }
    let mut budget: Option<u64> = None;
    for name in carriers {
        let Some(value) = headers.get(name) else {
            continue;
        };
        match value.to_str().ok().and_then(|v| v.parse::<u64>().ok()) {
            Some(ms) => budget = Some(budget.map_or(ms, |b| b.min(ms))),
            None if flaw == Flaw::Lenient => {}
            None => return reply(StatusCode::BAD_REQUEST, format!("malformed {name}\n")),
        }
    }
    let mut budget = budget.unwrap_or(1000);
    if flaw != Flaw::NoClamp {
        budget = budget.min(30_000);
    }
    if flaw == Flaw::TrustsDate {
        if let Some(sent) = headers
            .get("date")
            .and_then(|d| httpdate::parse_http_date(d.to_str().ok()?).ok())
        {
            let age = std::time::SystemTime::now()
                .duration_since(sent)
                .unwrap_or_default();
            budget = budget.saturating_sub(u64::try_from(age.as_millis()).unwrap_or(u64::MAX));
        }
    }
    if budget < 10 && flaw != Flaw::NoThreshold {
        let mut refused = reply(StatusCode::SERVICE_UNAVAILABLE, "refused\n".into());
        refused
            .headers_mut()
            .insert("retry-after", axum::http::HeaderValue::from_static("0"));
        return refused;
    }
    let left = budget.saturating_sub(u64::try_from(start.elapsed().as_millis()).unwrap_or(0));
    let told = if matches!(flaw, Flaw::NoMargin | Flaw::NoClamp) {
        budget
    } else {
        left.saturating_sub(5)
    };
    let mut to_third = http.get(format!("http://{third}/lookup"));
    if flaw == Flaw::TellsThirdParty {
        to_third = to_third.header("x-request-timeout-ms", told.to_string());
    }
    if let Some(trace) = headers.get("traceparent") {
        to_third = to_third.header("traceparent", trace.clone());
    }
    let _ = to_third.timeout(Duration::from_millis(left)).send().await;
    let call = http
        .get(format!("http://{downstream}/dep"))
        .header("x-request-timeout-ms", told.to_string())
        .send();
    let call = async {
        let answer = call.await;
        match answer {
            Ok(a)
                if (flaw == Flaw::Retries && a.status().is_server_error())
                    || (flaw == Flaw::RetriesCancelled && a.status().as_u16() == 499) =>
            {
                http.get(format!("http://{downstream}/dep"))
                    .header("x-request-timeout-ms", told.to_string())
                    .send()
                    .await
            }
            other => other,
        }
    };
    match tokio::time::timeout(Duration::from_millis(left), call).await {
        Ok(Ok(answer)) => reply(StatusCode::OK, answer.status().to_string()),
        Ok(Err(e)) => reply(StatusCode::BAD_GATEWAY, e.to_string()),
        Err(_) if flaw == Flaw::TooMany => reply(StatusCode::TOO_MANY_REQUESTS, "busy\n".into()),
        Err(_) => reply(StatusCode::GATEWAY_TIMEOUT, "deadline\n".into()),
    }
}

fn reply(status: axum::http::StatusCode, body: String) -> axum::response::Response {
    use axum::response::IntoResponse;
    (status, body).into_response()
}

/// The home-made service with `flaw`: its scorecard.
async fn check_home_made(flaw: Flaw) -> Scorecard {
    let _serial = CHECK.lock().await;
    let (downstream, third) = (free_addr(), free_addr());
    let service = home_made_service(downstream, third, flaw).await;
    let mut args = args(service, downstream);
    args.third_party = Some(third);
    let card = check::check(&args).await.unwrap();
    println!("{flaw:?}:\n{}", card.text());
    card
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_home_made_middleware_that_keeps_the_rules_passes_them() {
    let card = check_home_made(Flaw::None).await;
    assert!(!card.failed(), "{}", card.text());
}

/// Each rule's check, seen to fail against a service written to break that rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_rule_fails_against_a_service_that_breaks_it() {
    for (flaw, rule) in [
        (Flaw::TrustsDate, "C1"),
        (Flaw::NoMargin, "C2"),
        (Flaw::NoClamp, "C9"),
        (Flaw::OneCarrier, "tightest"),
        (Flaw::Lenient, "malformed"),
        (Flaw::TooMany, "C10"),
        (Flaw::NoThreshold, "C3"),
        (Flaw::Retries, "C6"),
        (Flaw::RetriesCancelled, "C6"),
        (Flaw::TellsThirdParty, "C19"),
    ] {
        let card = check_home_made(flaw).await;
        assert_eq!(
            verdict(&card, rule),
            Verdict::Fail,
            "{flaw:?}:\n{}",
            card.text()
        );
        if flaw == Flaw::RetriesCancelled {
            // Judged on the cancelled answer: once after the expired one, twice after it.
            let c6 = &card.line("C6").unwrap().observed;
            assert!(c6.contains("called 1 time(s); cancelled: "), "{c6}");
            assert!(c6.ends_with("called 2 time(s)"), "{c6}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_that_swallows_the_deadline_fails_c4_and_c3() {
    let _serial = CHECK.lock().await;
    let downstream = free_addr();
    let service = swallowing_service(downstream).await;
    let card = check::check(&args(service, downstream)).await.unwrap();
    println!("{}", card.text());
    assert_eq!(verdict(&card, "C4"), Verdict::Fail, "{}", card.text());
    assert_eq!(verdict(&card, "C3"), Verdict::Fail, "{}", card.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_whose_call_outlives_its_caller_fails_c5() {
    let _serial = CHECK.lock().await;
    let downstream = free_addr();
    let service = forgetful_service(downstream, true).await;
    let card = check::check(&args(service, downstream)).await.unwrap();
    println!("{}", card.text());
    assert_eq!(verdict(&card, "C5"), Verdict::Fail, "{}", card.text());
}

/// A forgetful service that forwards the trace context (its tracing library does) but no
/// deadline, calling its downstream through the sidecar's egress, set once the proxy is up.
/// Like the forgetful service above it has a fresh 5 s timeout of its own.
async fn forgetful_behind(egress: Arc<OnceLock<SocketAddr>>) -> SocketAddr {
    use axum::http::StatusCode;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let router = Router::new().route(
        "/work",
        get(move |headers: axum::http::HeaderMap| {
            let (http, egress) = (http.clone(), egress.clone());
            async move {
                let mut call = http.get(format!("http://{}/dep", egress.get().unwrap()));
                if let Some(trace) = headers.get("traceparent") {
                    call = call.header("traceparent", trace.clone());
                }
                // It hands on its downstream's status and `Retry-After` (the egress's 504, or
                // its 503 refusal): one that answers 200 whatever happened below fails C4 and
                // C3 behind the sidecar too, and one that drops `Retry-After` fails C3.
                match call.send().await {
                    Ok(answer) => {
                        let mut relayed = reply(answer.status(), String::new());
                        if let Some(retry) = answer.headers().get("retry-after") {
                            relayed.headers_mut().insert("retry-after", retry.clone());
                        }
                        relayed
                    }
                    Err(e) => reply(StatusCode::BAD_GATEWAY, format!("downstream failed: {e}")),
                }
            }
        }),
    );
    serve(router).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_forgetful_service_behind_the_sidecar_passes() {
    let _serial = CHECK.lock().await;
    let downstream = free_addr();
    let egress = Arc::new(OnceLock::new());
    let service = forgetful_behind(egress.clone()).await;
    let to = format!("127.0.0.1:0={downstream}");
    let proxy = proxy::Proxy::start(service, None, &["--egress-to", &to]).await;
    egress.set(proxy.egress_to[0]).unwrap();
    let card = check::check(&args(proxy.addr, downstream)).await.unwrap();
    let text = card.text();
    println!("{text}");
    for line in &card.lines {
        let expected = if ["C1-step", "C19"].contains(&line.rule) {
            Verdict::NotApplicable
        } else {
            Verdict::Pass
        };
        assert_eq!(line.verdict, expected, "{}:\n{text}", line.rule);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_prints_json_and_its_exit_status_says_pass_or_fail() {
    let _serial = CHECK.lock().await;
    for (swallows, status) in [(false, 0), (true, 1)] {
        let downstream = free_addr();
        let service = if swallows {
            swallowing_service(downstream).await
        } else {
            library_service(downstream).await
        };
        let target = format!("http://{service}/work");
        let downstream = downstream.to_string();
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_hopbudget"))
            .args([
                "check",
                "--json",
                "--target",
                &target,
                "--downstream",
                &downstream,
            ])
            .output()
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(status), "{stdout}");
        let card: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        let lines = card["lines"].as_array().unwrap();
        let failed: Vec<_> = lines
            .iter()
            .filter(|l| l["verdict"] == "fail")
            .map(|l| l["rule"].as_str().unwrap())
            .collect();
        if swallows {
            assert_eq!(failed, ["C4", "C3"], "{stdout}");
        } else {
            assert!(failed.is_empty(), "{stdout}");
        }
    }
}
