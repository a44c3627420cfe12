//! The gRPC client layer over real sockets: a streamed body is bounded by the budget, not
//! only the head (C4, C5); tonic's per-call `set_timeout` combines with the budget as the
//! tighter of the two (C16); a channel to a third party sends no `grpc-timeout`, judged on the
//! destination the layer was built for, since a tonic request names none (C19, S16).
#![cfg(feature = "grpc")]

use std::time::{Duration, Instant};

use crate::grpc_support::*;
use std::sync::Arc;

use hopbudget::grpc::client::GrpcReplies;
use hopbudget::grpc::client::{GrpcClient, GrpcClientLayer, ReplayLayer, into_tonic};
use hopbudget::retry::DeadlineRetry;
use hopbudget::{BudgetError, Profile, Refused, RequestBudget};
use hopbudget_testkit::HOP_WATCH_PATH;
use hopbudget_testkit::pb::CallRequest;
use hopbudget_testkit::pb::hop_client::HopClient;
use tonic::Code;
use tonic::transport::Channel;
use tower::ServiceBuilder;

const LOOSE: Duration = Duration::from_secs(2);

/// A server whose `Watch` route is a stream route: after the first message it runs for the
/// stream lifetime, so only the client can end the stream at the caller's budget.
async fn streaming_server() -> Server {
    let profile = Profile::from_yaml(
        &format!("routes:\n  - path: {HOP_WATCH_PATH}\n    mode: stream\n"),
        "stream.yaml",
    )
    .unwrap();
    serve_profile("watch", profile).await
}

fn watch(count: u32, every_ms: u64) -> CallRequest {
    CallRequest {
        work_ms: every_ms,
        count,
        ..Default::default()
    }
}

#[tokio::test]
async fn a_trickled_stream_ends_at_the_budget_as_deadline_exceeded() {
    let server = streaming_server().await;
    let mut client = grpc_client(&Profile::default(), &server.url());
    let b = budget(300);
    let start = Instant::now();
    let result = b
        .scope(async {
            // 100 messages 100 ms apart: 10 s if nobody stops it.
            let mut stream = client.watch(watch(100, 100)).await?.into_inner();
            let mut got = 0;
            while stream.message().await?.is_some() {
                got += 1;
            }
            Ok::<_, tonic::Status>(got)
        })
        .await;
    let status = result.unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert_eq!(
        status.metadata().get("x-deadline-outcome").unwrap(),
        "expired"
    );
    assert!(start.elapsed() < LOOSE, "held for {:?}", start.elapsed());
}

#[tokio::test]
async fn a_trickled_stream_ends_as_cancelled_when_the_caller_goes_away() {
    let server = streaming_server().await;
    let mut client = grpc_client(&Profile::default(), &server.url());
    let b = RequestBudget::local(Duration::from_secs(5), Profile::default().policy());
    let canceller = b.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        canceller.cancel();
    });
    let start = Instant::now();
    let result = b
        .scope(async {
            let mut stream = client.watch(watch(100, 100)).await?.into_inner();
            while stream.message().await?.is_some() {}
            Ok::<_, tonic::Status>(())
        })
        .await;
    let status = result.unwrap_err();
    assert_eq!(status.code(), Code::Cancelled, "{status:?}");
    assert!(start.elapsed() < LOOSE, "held for {:?}", start.elapsed());
}

fn with_timeout(req: CallRequest, timeout: Duration) -> tonic::Request<CallRequest> {
    let mut req = tonic::Request::new(req);
    req.set_timeout(timeout);
    req
}

/// The `grpc-timeout` the server received, in milliseconds.
fn told_ms(raw: &str) -> u64 {
    let (digits, unit) = raw.split_at(raw.len() - 1);
    let n: u64 = digits.parse().unwrap();
    match unit {
        "n" => n / 1_000_000,
        "u" => n / 1_000,
        "m" => n,
        "S" => n * 1_000,
        other => panic!("unexpected unit {other} in {raw}"),
    }
}

#[tokio::test]
async fn a_shorter_set_timeout_wins_over_the_budget() {
    let server = serve_profile("leaf", Profile::default()).await;
    let mut client = grpc_client(&Profile::default(), &server.url());
    // What the callee is told.
    let reply = budget(5_000)
        .scope(client.call(with_timeout(call(&[], 0), Duration::from_millis(150))))
        .await
        .unwrap()
        .into_inner();
    let told = told_ms(&reply.grpc_timeout[0]);
    assert!(told <= 150, "the tighter value goes out, got {told} ms");
    // And the wait: 3 s of work against a 150 ms per-call timeout in a 5 s budget.
    let start = Instant::now();
    let status = budget(5_000)
        .scope(client.call(with_timeout(call(&[], 3_000), Duration::from_millis(150))))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn a_longer_set_timeout_never_extends_the_budget() {
    let server = serve_profile("leaf", Profile::default()).await;
    let mut client = grpc_client(&Profile::default(), &server.url());
    let reply = budget(300)
        .scope(client.call(with_timeout(call(&[], 0), Duration::from_secs(5))))
        .await
        .unwrap()
        .into_inner();
    let told = told_ms(&reply.grpc_timeout[0]);
    assert!(told <= 294, "the budget wins, got {told} ms");
    let start = Instant::now();
    let status = budget(300)
        .scope(client.call(with_timeout(call(&[], 3_000), Duration::from_secs(5))))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(start.elapsed() < LOOSE, "{:?}", start.elapsed());
}

/// A channel to `http://{name}:PORT` whose connections go to `server` on loopback: the name is
/// what the channel (and its `:authority`) says, the socket is a real server that records the
/// `grpc-timeout` it received (`CallReply::grpc_timeout`).
fn channel_named(name: &str, server: &Server) -> (tonic::transport::Endpoint, Channel) {
    let addr = server.addr;
    let endpoint =
        tonic::transport::Endpoint::from_shared(format!("http://{name}:{}", addr.port())).unwrap();
    let connector = tower::service_fn(move |_uri: http::Uri| async move {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
    });
    let channel = endpoint.connect_with_connector_lazy(connector);
    (endpoint, channel)
}

fn through(layer: GrpcClientLayer, channel: Channel) -> HopClient<GrpcClient<Channel>> {
    HopClient::new(ServiceBuilder::new().layer(layer).service(channel))
}

#[tokio::test]
async fn s16_a_channel_to_a_third_party_sends_no_grpc_timeout() {
    let server = serve_profile("payments", Profile::default()).await;
    // The layer names the channel's destination; the profile's trusted hosts judge it (C19).
    let (endpoint, channel) = channel_named("api.payments.example", &server);
    let mut payments = through(
        GrpcClientLayer::new(Profile::default()).destination(endpoint.uri()),
        channel,
    );
    // Even a per-call timeout the application set stays inside.
    let reply = budget(800)
        .scope(payments.call(with_timeout(call(&[], 0), Duration::from_millis(400))))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        reply.grpc_timeout[0], "",
        "no deadline header to a third party"
    );
    assert_eq!(reply.source[0], "fallback");
    // An internal destination, through the same kind of channel, gets one.
    let (endpoint, channel) = channel_named("tax.internal", &server);
    let mut tax = through(
        GrpcClientLayer::new(Profile::default()).destination(endpoint.uri()),
        channel,
    );
    let reply = budget(500)
        .scope(tax.call(call(&[], 0)))
        .await
        .unwrap()
        .into_inner();
    assert!(told_ms(&reply.grpc_timeout[0]) <= 494);
    // The third party's wait is still bounded by the budget.
    let start = Instant::now();
    let status = budget(300)
        .scope(payments.call(call(&[], 3_000)))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(start.elapsed() < LOOSE);
}

#[tokio::test]
async fn an_unnamed_destination_follows_the_profiles_unknown_destination_choice() {
    // Without `destination`, the layer sees only `/hopbudget.test.Hop/Call`: the default
    // (`trusted`, as gRPC itself sends `grpc-timeout` everywhere) stamps; a profile that puts
    // hygiene first (`untrusted`) does not.
    let server = serve_profile("payments", Profile::default()).await;
    let (_, channel) = channel_named("api.payments.example", &server);
    let mut unnamed = through(GrpcClientLayer::new(Profile::default()), channel.clone());
    let reply = budget(500)
        .scope(unnamed.call(call(&[], 0)))
        .await
        .unwrap()
        .into_inner();
    assert!(told_ms(&reply.grpc_timeout[0]) <= 494, "{reply:?}");
    let strict =
        Profile::from_yaml("outbound: {unknown_destination: untrusted}", "strict.yaml").unwrap();
    let mut unnamed = through(GrpcClientLayer::new(strict.clone()), channel);
    let reply = budget(500)
        .scope(unnamed.call(call(&[], 0)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(reply.grpc_timeout[0], "");
    // Under that profile a named internal destination still gets its deadline.
    let (endpoint, channel) = channel_named("tax.internal", &server);
    let mut tax = through(
        GrpcClientLayer::new(strict).destination(endpoint.uri()),
        channel,
    );
    let reply = budget(500)
        .scope(tax.call(call(&[], 0)))
        .await
        .unwrap()
        .into_inner();
    assert!(told_ms(&reply.grpc_timeout[0]) <= 494);
}

/// A plain tonic server, no hopbudget layer: its handler takes 10 s, and tonic's own
/// `grpc-timeout` timer answers CANCELLED ("Timeout expired") at the deadline it was told.
async fn plain_slow_server() -> std::net::SocketAddr {
    struct Slow;
    #[tonic::async_trait]
    impl hopbudget_testkit::pb::hop_server::Hop for Slow {
        type WatchStream = WatchStream;
        async fn watch(
            &self,
            _: tonic::Request<CallRequest>,
        ) -> Result<tonic::Response<WatchStream>, tonic::Status> {
            Err(tonic::Status::unimplemented("watch"))
        }
        async fn call(
            &self,
            _: tonic::Request<CallRequest>,
        ) -> Result<tonic::Response<hopbudget_testkit::pb::CallReply>, tonic::Status> {
            tokio::time::sleep(Duration::from_secs(10)).await;
            Ok(tonic::Response::new(Default::default()))
        }
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(hopbudget_testkit::pb::hop_server::HopServer::new(Slow))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await
            .unwrap();
    });
    addr
}

#[tokio::test]
async fn a_peers_cancelled_at_its_deadline_is_expiry_as_in_the_http_clients() {
    // C4, one rule for every client: a `cancelled` answer that arrives once the callee's
    // deadline has passed is expiry (`a_cancelled_answer_after_the_callees_deadline_is_expiry_in_both_http_clients`
    // checks the same for HTTP).
    let addr = plain_slow_server().await;
    let mut client = grpc_client(&Profile::default(), &format!("http://{addr}"));
    let status = budget(300)
        .scope(client.call(call(&[], 0)))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert_eq!(
        hopbudget::BudgetError::from_grpc(&status),
        Some(hopbudget::BudgetError::Expired),
        "{status:?}"
    );
}

// ---- issue 32, item 8: a retry sees a gRPC refusal (C6) ----

/// A server behind `GrpcServerLayer` whose first call refuses (stating it needs `needs`), and
/// whose later calls succeed. Counts the calls its handler got.
async fn refuse_once_server(
    needs: Duration,
) -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    struct RefuseOnce {
        needs: Duration,
        calls: Arc<std::sync::atomic::AtomicUsize>,
    }
    #[tonic::async_trait]
    impl hopbudget_testkit::pb::hop_server::Hop for RefuseOnce {
        type WatchStream = WatchStream;
        async fn watch(
            &self,
            _: tonic::Request<CallRequest>,
        ) -> Result<tonic::Response<WatchStream>, tonic::Status> {
            Err(tonic::Status::unimplemented("watch"))
        }
        async fn call(
            &self,
            request: tonic::Request<CallRequest>,
        ) -> Result<tonic::Response<hopbudget_testkit::pb::CallReply>, tonic::Status> {
            let budget = RequestBudget::current().expect("the server layer's budget");
            let n = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if n == 0 {
                // This replica is busy: it states what a call needs to be worth starting (C3),
                // and another attempt (another replica) may have it.
                let refused = Refused::new(self.needs, budget.remaining());
                return Err(BudgetError::Refused(refused).into());
            }
            let told = request
                .metadata()
                .get("grpc-timeout")
                .map(|v| v.to_str().unwrap().to_owned())
                .unwrap_or_default();
            Ok(tonic::Response::new(hopbudget_testkit::pb::CallReply {
                grpc_timeout: vec![told],
                ..Default::default()
            }))
        }
    }
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let handler = RefuseOnce {
        needs,
        calls: calls.clone(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .layer(hopbudget::grpc::server::GrpcServerLayer::new(
                Profile::default().with_service("busy"),
            ))
            .add_service(hopbudget_testkit::pb::hop_server::HopServer::new(handler))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await
            .unwrap();
    });
    (addr, calls)
}

/// The stack the docs pair: the body kept for a second attempt, `DeadlineRetry` classified by
/// `GrpcReplies` outside `GrpcClientLayer`, a real tonic `Channel` below.
fn retrying_client(
    addr: std::net::SocketAddr,
) -> HopClient<
    impl tonic::client::GrpcService<
        tonic::body::Body,
        ResponseBody = impl http_body::Body<Data = bytes::Bytes, Error = impl Into<tower::BoxError>>
                       + Send
                       + 'static,
        Error = impl Into<tower::BoxError>,
        Future = impl Send,
    >,
> {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap();
    HopClient::new(
        ServiceBuilder::new()
            .layer(ReplayLayer)
            .layer(tower::retry::RetryLayer::new(DeadlineRetry::new(
                GrpcReplies,
                2,
            )))
            .layer(GrpcClientLayer::new(Profile::default()).destination(endpoint.uri()))
            .map_request(into_tonic)
            .service(endpoint.connect_lazy()),
    )
}

#[tokio::test]
async fn a_grpc_refusal_is_retried_only_when_the_forward_budget_covers_the_requirement() {
    // 1 s left: the forward budget (994 ms) covers the 200 ms the refuser needs: one retry,
    // which succeeds, stamped from the same shrinking budget (C6).
    let (addr, calls) = refuse_once_server(Duration::from_millis(200)).await;
    let reply = budget(1_000)
        .scope(retrying_client(addr).call(call(&[], 0)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert!(told_ms(&reply.grpc_timeout[0]) <= 994, "{reply:?}");

    // 150 ms left: 144 ms to forward does not cover 200 ms. No retry; the refusal, with the
    // requirement it stated, is the caller's answer.
    let (addr, calls) = refuse_once_server(Duration::from_millis(200)).await;
    let status = budget(150)
        .scope(retrying_client(addr).call(call(&[], 0)))
        .await
        .unwrap_err();
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    match BudgetError::from_grpc(&status) {
        Some(BudgetError::Refused(r)) => assert_eq!(r.required(), Duration::from_millis(200)),
        other => panic!("expected the refusal, got {other:?} from {status:?}"),
    }
}
