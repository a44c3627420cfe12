//! `hopbudget check --grpc` (issue #47) against real tonic services on loopback, the checker
//! calling them over h2c and playing their gRPC downstream: a service on the library's gRPC
//! layers passes every rule; a forgetful one (a fresh 5 s timeout of its own, no
//! `grpc-timeout` forwarded) fails C2 and C8 and the scorecard names its 5 s; a home-made
//! middleware fails each rule it was written to break; a target that is not gRPC exits 2.
//!
//! One file on purpose, over 500 lines: the tests share the tonic services built here.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use crate::support::serial::CHECK;
use hopbudget::Profile;
use hopbudget::grpc::client::{GrpcClient, GrpcClientLayer};
use hopbudget::grpc::server::GrpcServerLayer;
use hopbudget_cli::check::scorecard::{Scorecard, Verdict};
use hopbudget_cli::check::{self, CheckArgs};
use hopbudget_testkit::pb::hop_client::HopClient;
use hopbudget_testkit::pb::hop_server::{Hop, HopServer};
use hopbudget_testkit::pb::{CallReply, CallRequest};
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status};

/// The method the checker calls.
const METHOD: &str = "hopbudget.testkit.Hop/Call";

/// A port free a moment ago: the service must know its downstream before the checker
/// listens there.
fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// A lazy channel to `addr`: the checker listens there only once the service is up.
fn channel(addr: SocketAddr) -> Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy()
}

type Stream = tonic::codegen::BoxStream<CallReply>;

/// A service on the library's layers: `GrpcServerLayer` in, `GrpcClientLayer` out, the
/// downstream's status handed on as it came.
#[derive(Clone)]
struct Library {
    downstream: HopClient<GrpcClient<Channel>>,
}

#[tonic::async_trait]
impl Hop for Library {
    type WatchStream = Stream;

    async fn watch(&self, _: Request<CallRequest>) -> Result<Response<Stream>, Status> {
        Err(Status::unimplemented("not checked"))
    }

    async fn call(&self, _: Request<CallRequest>) -> Result<Response<CallReply>, Status> {
        self.downstream.clone().call(CallRequest::default()).await
    }
}

async fn library_service(downstream: SocketAddr) -> SocketAddr {
    let profile = Profile::default().with_service("checked");
    let client = tower::ServiceBuilder::new()
        .layer(GrpcClientLayer::new(profile.clone()))
        .service(channel(downstream));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = HopServer::new(Library {
        downstream: HopClient::new(client),
    });
    tokio::spawn(
        tonic::transport::Server::builder()
            .layer(GrpcServerLayer::new(profile))
            .add_service(service)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    addr
}

/// A forgetful service: no hopbudget, a plain tonic client and a fresh 5 s timeout of its
/// own around the call (grpc-go's `context.WithTimeout(context.Background(), ...)` without
/// the header, or a client-side timer): no deadline reaches the downstream. `detached`: the
/// call runs in a task of its own, which a caller leaving does not cancel (breaks C5).
#[derive(Clone)]
struct Forgetful {
    downstream: HopClient<Channel>,
    detached: bool,
}

#[tonic::async_trait]
impl Hop for Forgetful {
    type WatchStream = Stream;

    async fn watch(&self, _: Request<CallRequest>) -> Result<Response<Stream>, Status> {
        Err(Status::unimplemented("not checked"))
    }

    async fn call(&self, _: Request<CallRequest>) -> Result<Response<CallReply>, Status> {
        let mut client = self.downstream.clone();
        let call = async move {
            match tokio::time::timeout(Duration::from_secs(5), client.call(CallRequest::default()))
                .await
            {
                Ok(answer) => answer,
                Err(_) => Err(Status::unavailable("downstream timed out")),
            }
        };
        if self.detached {
            tokio::spawn(call).await.unwrap()
        } else {
            call.await
        }
    }
}

/// Serve `handler` with tonic alone (no hopbudget layer).
async fn serve_plain(handler: impl Hop) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(HopServer::new(handler))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    addr
}

fn args(target: SocketAddr, downstream: SocketAddr) -> CheckArgs {
    CheckArgs {
        target: format!("http://{target}"),
        downstream,
        route: None,
        min_budget: None,
        third_party: None,
        grpc: Some(METHOD.into()),
        json: false,
    }
}

fn verdict(card: &Scorecard, rule: &str) -> Verdict {
    card.line(rule)
        .unwrap_or_else(|| panic!("no {rule} line in\n{}", card.text()))
        .verdict
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tonic_service_on_the_librarys_layers_passes_every_grpc_rule() {
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
    let c8 = &card.line("C8").unwrap().observed;
    assert!(c8.contains("downstream told grpc-timeout"), "{text}");
    assert!(
        card.line("C4")
            .unwrap()
            .observed
            .contains("DEADLINE_EXCEEDED"),
        "{text}"
    );
    assert!(
        card.line("malformed")
            .unwrap()
            .observed
            .contains("INVALID_ARGUMENT"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgetful_tonic_service_fails_c2_and_c8_and_the_card_names_its_fresh_default() {
    let _serial = CHECK.lock().await;
    let downstream = free_addr();
    let service = serve_plain(Forgetful {
        downstream: HopClient::new(channel(downstream)),
        detached: false,
    })
    .await;
    let card = check::check(&args(service, downstream)).await.unwrap();
    let text = card.text();
    println!("{text}");
    for rule in ["C2", "C8"] {
        assert_eq!(verdict(&card, rule), Verdict::Fail, "{rule}:\n{text}");
        let observed = &card.line(rule).unwrap().observed;
        assert!(
            observed.contains("no deadline reached the downstream"),
            "{text}"
        );
    }
    // With no deadline sent, the fresh 5 s, measured as the time it held the downstream.
    // (With one, tonic's server times the handler out at it first: the card says so.)
    let c8 = &card.line("C8").unwrap().observed;
    let ms: u64 = c8
        .split("hung up on it after ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no hang-up time in {c8:?}"));
    assert!((4_500..=6_000).contains(&ms), "{text}");
    assert!(c8.contains("a fresh default of its own"), "{text}");
    assert!(
        card.line("C2")
            .unwrap()
            .observed
            .contains("at the caller's deadline: kept for its own wait, not forwarded"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tonic_service_whose_call_outlives_its_caller_fails_c5() {
    let _serial = CHECK.lock().await;
    let downstream = free_addr();
    let service = serve_plain(Forgetful {
        downstream: HopClient::new(channel(downstream)),
        detached: true,
    })
    .await;
    let card = check::check(&args(service, downstream)).await.unwrap();
    println!("{}", card.text());
    assert_eq!(verdict(&card, "C5"), Verdict::Fail, "{}", card.text());
}

/// One way a home-made gRPC deadline middleware can break a rule; `None` keeps every rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flaw {
    None,
    /// Subtracts the age the `date` header claims (C1).
    TrustsDate,
    /// Forwards the budget it was given, not what is left of it (C2).
    NoMargin,
    /// Forwards any budget, however large (C9).
    NoClamp,
    /// Reads only `grpc-timeout` (tightest).
    OneCarrier,
    /// Reads a malformed `grpc-timeout` as no deadline (malformed).
    Lenient,
    /// Rejects a malformed `grpc-timeout` with INTERNAL, not INVALID_ARGUMENT (malformed).
    Internal,
    /// Answers a deadline's end with RESOURCE_EXHAUSTED (C10).
    Exhausted,
    /// Answers a deadline's end with CANCELLED, as tonic's own timer does (C4).
    Cancels,
    /// No refuse threshold: calls the downstream however little is left (C3).
    NoThreshold,
    /// Calls again when the downstream fails, even after DEADLINE_EXCEEDED (C6).
    Retries,
    /// Calls again when the downstream answers CANCELLED only (C6's second half).
    RetriesCancelled,
    /// Tells the third party it also calls its deadline (C19).
    TellsThirdParty,
}

/// A hand-rolled gRPC deadline middleware, as a team without the library would write it on
/// tonic: reads `grpc-timeout` and Envoy's header (the tightest wins), INVALID_ARGUMENT on a
/// malformed one, 1000 ms when none, clamped to 30 s, DEADLINE_EXCEEDED under 10 ms without
/// calling, and calls the downstream with what is left less 20 ms in `grpc-timeout`
/// (DEADLINE_EXCEEDED when it runs out). It calls a third party first, with no deadline.
/// `flaw` breaks one rule.
#[derive(Clone)]
struct HomeMade {
    downstream: HopClient<Channel>,
    third: HopClient<Channel>,
    flaw: Flaw,
}

/// The home-made middleware's margin: the call's connection (a lazy channel's first) and the
/// time before the handler ran come out of it.
const MARGIN_MS: u64 = 20;

/// `grpc-timeout`'s value in milliseconds; `None` when malformed.
fn grpc_timeout_ms(value: &str) -> Option<u64> {
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => n * 3_600_000,
        "M" => n * 60_000,
        "S" => n * 1000,
        "m" => n,
        "u" => n / 1000,
        "n" => n / 1_000_000,
        _ => return None,
    })
}

impl HomeMade {
    fn budget(&self, request: &Request<CallRequest>) -> Result<u64, Status> {
        let flaw = self.flaw;
        let md = request.metadata();
        let mut budget: Option<u64> = None;
        if let Some(value) = md.get("grpc-timeout") {
            match value.to_str().ok().and_then(grpc_timeout_ms) {
                Some(ms) => budget = Some(ms),
                None if flaw == Flaw::Lenient => {}
                None if flaw == Flaw::Internal => {
                    return Err(Status::internal("malformed grpc-timeout"));
                }
                None => return Err(Status::invalid_argument("malformed grpc-timeout")),
            }
        }
        if flaw != Flaw::OneCarrier {
            if let Some(ms) = md
                .get("x-envoy-expected-rq-timeout-ms")
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
            {
                budget = Some(budget.map_or(ms, |b| b.min(ms)));
            }
        }
        let mut budget = budget.unwrap_or(1000);
        if flaw != Flaw::NoClamp {
            budget = budget.min(30_000);
        }
        if flaw == Flaw::TrustsDate {
            if let Some(sent) = md
                .get("date")
                .and_then(|d| httpdate::parse_http_date(d.to_str().ok()?).ok())
            {
                let age = SystemTime::now().duration_since(sent).unwrap_or_default();
                budget = budget.saturating_sub(u64::try_from(age.as_millis()).unwrap_or(u64::MAX));
            }
        }
        Ok(budget)
    }
}

#[tonic::async_trait]
impl Hop for HomeMade {
    type WatchStream = Stream;

    async fn watch(&self, _: Request<CallRequest>) -> Result<Response<Stream>, Status> {
        Err(Status::unimplemented("not checked"))
    }

    async fn call(&self, request: Request<CallRequest>) -> Result<Response<CallReply>, Status> {
        let start = tokio::time::Instant::now();
        let flaw = self.flaw;
        let budget = self.budget(&request)?;
        if budget < 10 && flaw != Flaw::NoThreshold {
            return Err(Status::deadline_exceeded("refused: too little time left"));
        }
        let deadline = start + Duration::from_millis(budget);
        let left = || {
            u64::try_from(
                deadline
                    .saturating_duration_since(tokio::time::Instant::now())
                    .as_millis(),
            )
            .unwrap_or(u64::MAX)
        };
        let told = |left: u64| match flaw {
            Flaw::NoMargin | Flaw::NoClamp => budget,
            // Whatever is left, rounded up to what its client accepts: it calls anyway.
            Flaw::NoThreshold => left.saturating_sub(MARGIN_MS).max(MARGIN_MS),
            _ => left.saturating_sub(MARGIN_MS),
        };
        let outgoing = |told: Option<u64>| {
            let mut call = Request::new(CallRequest::default());
            if let Some(ms) = told {
                call.set_timeout(Duration::from_millis(ms));
            }
            call
        };
        let to_third = outgoing((flaw == Flaw::TellsThirdParty).then_some(told(left())));
        let _ = tokio::time::timeout_at(deadline, self.third.clone().call(to_third)).await;
        let told = told(left());
        let mut client = self.downstream.clone();
        let call = async {
            match client.call(outgoing(Some(told))).await {
                Err(s) if flaw == Flaw::Retries => {
                    let _ = s;
                    client.call(outgoing(Some(told))).await
                }
                Err(s) if flaw == Flaw::RetriesCancelled && s.code() == Code::Cancelled => {
                    client.call(outgoing(Some(told))).await
                }
                other => other,
            }
        };
        // Its own wait ends a little before the deadline: tonic's server times out the
        // handler at `grpc-timeout` itself (from before the handler ran), and answers
        // CANCELLED.
        let wait = if flaw == Flaw::NoThreshold {
            tokio::time::Instant::now() + Duration::from_millis(told)
        } else {
            deadline - Duration::from_millis(MARGIN_MS)
        };
        let answer = tokio::time::timeout_at(wait, call).await;
        // A failure once the time is gone is the deadline's end (tonic's channel times the
        // call out at the `grpc-timeout` it sent, and says CANCELLED).
        let ran_out = match &answer {
            Ok(Err(_)) => left() <= MARGIN_MS,
            Ok(Ok(_)) => false,
            Err(_) => true,
        };
        match answer {
            Ok(answer) if !ran_out => answer,
            _ if flaw == Flaw::Exhausted => Err(Status::resource_exhausted("busy")),
            _ if flaw == Flaw::Cancels => Err(Status::cancelled("timed out")),
            _ => Err(Status::deadline_exceeded("deadline")),
        }
    }
}

/// The home-made service with `flaw`: its scorecard.
async fn check_home_made(flaw: Flaw) -> Scorecard {
    let _serial = CHECK.lock().await;
    let (downstream, third) = (free_addr(), free_addr());
    let service = serve_plain(HomeMade {
        downstream: HopClient::new(channel(downstream)),
        third: HopClient::new(channel(third)),
        flaw,
    })
    .await;
    let mut args = args(service, downstream);
    args.third_party = Some(third);
    let card = check::check(&args).await.unwrap();
    println!("{flaw:?}:\n{}", card.text());
    card
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_home_made_grpc_middleware_that_keeps_the_rules_passes_them() {
    let card = check_home_made(Flaw::None).await;
    assert!(!card.failed(), "{}", card.text());
    assert_eq!(verdict(&card, "C19"), Verdict::Pass, "{}", card.text());
}

/// Each rule's gRPC check, seen to fail against a service written to break that rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_grpc_rule_fails_against_a_service_that_breaks_it() {
    for (flaw, rule, seen) in [
        (Flaw::TrustsDate, "C1", ""),
        (Flaw::NoMargin, "C2", ""),
        (Flaw::NoClamp, "C9", ""),
        (Flaw::OneCarrier, "tightest", ""),
        (Flaw::Lenient, "malformed", ""),
        (Flaw::Internal, "malformed", "13 INTERNAL"),
        (Flaw::Exhausted, "C10", "RESOURCE_EXHAUSTED"),
        (Flaw::Cancels, "C4", "CANCELLED"),
        (Flaw::NoThreshold, "C3", ""),
        (Flaw::Retries, "C6", "expired: "),
        (Flaw::RetriesCancelled, "C6", "cancelled: "),
        (Flaw::TellsThirdParty, "C19", ""),
    ] {
        let card = check_home_made(flaw).await;
        let line = card.line(rule).unwrap();
        assert_eq!(line.verdict, Verdict::Fail, "{flaw:?}:\n{}", card.text());
        assert!(line.observed.contains(seen), "{flaw:?}:\n{}", card.text());
    }
    // The cancelled half of C6 is judged on its own: a service that retries only after
    // CANCELLED was called twice there and once after DEADLINE_EXCEEDED.
    let card = check_home_made(Flaw::RetriesCancelled).await;
    let c6 = &card.line("C6").unwrap().observed;
    assert!(
        c6.contains("expired: answered") && c6.contains("called 1 time(s); cancelled"),
        "{c6}"
    );
    assert!(c6.ends_with("called 2 time(s)"), "{c6}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_target_checked_with_grpc_is_bad_input() {
    let _serial = CHECK.lock().await;
    // An HTTP/1.1-only server: the h2 preface is no request to it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let target = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for mut stream in listener.incoming().flatten() {
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
        }
    });
    let err = check::check(&args(target, free_addr())).await.unwrap_err();
    assert!(err.contains("answers nothing like gRPC"), "{err}");
}

#[test]
fn a_bad_grpc_method_is_named() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hopbudget"))
        .args([
            "check",
            "--target",
            "http://127.0.0.1:9",
            "--downstream",
            "127.0.0.1:0",
            "--grpc",
            "Greeter",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--grpc \"Greeter\": write SERVICE/METHOD"),
        "{err}"
    );
}
