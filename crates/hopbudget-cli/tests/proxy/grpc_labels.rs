//! `hopbudget proxy --descriptor-set FILE` labels each gRPC method the service's descriptor
//! set names from its first call (#50 item 7, C20): the first call of a real method, cancelled
//! by its caller before the service answered anything, is counted under its own route. Made-up
//! methods, of made-up services and of the real one, still share `other`.
//!
//! The proxy binary as a real process, a real tonic service behind it on loopback (the test
//! kit's `Hop` proto, whose descriptor set the test kit's build writes, as a service's build
//! does for reflection), and real tonic Channels calling through it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::support::proxy::{PATIENCE, Proxy};
use hopbudget_testkit::pb::hop_client::HopClient;
use hopbudget_testkit::pb::hop_server::{Hop, HopServer};
use hopbudget_testkit::pb::{CallReply, CallRequest};
use hopbudget_testkit::{HOP_CALL_PATH, HOP_DESCRIPTOR_SET};
use tokio::sync::Notify;

/// The `Hop` service, plain tonic: `Call` says it started, then works `work_ms`.
struct Leaf {
    started: Arc<Notify>,
}

#[tonic::async_trait]
impl Hop for Leaf {
    async fn call(
        &self,
        request: tonic::Request<CallRequest>,
    ) -> Result<tonic::Response<CallReply>, tonic::Status> {
        self.started.notify_one();
        tokio::time::sleep(Duration::from_millis(request.get_ref().work_ms)).await;
        Ok(tonic::Response::new(CallReply::default()))
    }

    type WatchStream = tonic::codegen::tokio_stream::Empty<Result<CallReply, tonic::Status>>;

    async fn watch(
        &self,
        _: tonic::Request<CallRequest>,
    ) -> Result<tonic::Response<Self::WatchStream>, tonic::Status> {
        Err(tonic::Status::unimplemented("not in this test"))
    }
}

/// Serve [`Leaf`] on 127.0.0.1:0.
async fn serve_leaf(started: Arc<Notify>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(HopServer::new(Leaf { started }))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await
            .unwrap();
    });
    addr
}

/// The sum of `hopbudget_hops_total` whose labels contain `labels`.
fn hops(metrics: &str, labels: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("hopbudget_hops_total{") && l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Wait until the proxy's `/metrics` counts `n` hops in all; its text.
async fn closed(proxy: &Proxy, n: u64) -> String {
    let end = tokio::time::Instant::now() + PATIENCE;
    loop {
        let text = proxy.metrics().await;
        if hops(&text, "") >= n || tokio::time::Instant::now() > end {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A unary call of any method path through `channel`, made-up ones included: its code.
async fn call_path(channel: tonic::transport::Channel, path: String) -> tonic::Code {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let codec = tonic_prost::ProstCodec::<CallRequest, CallReply>::default();
    let path = http::uri::PathAndQuery::try_from(path).unwrap();
    let mut request = tonic::Request::new(CallRequest::default());
    request.set_timeout(Duration::from_secs(5));
    match grpc.unary(request, path, codec).await {
        Ok(_) => tonic::Code::Ok,
        Err(status) => status.code(),
    }
}

#[tokio::test]
async fn a_real_methods_first_call_cancelled_before_any_answer_is_counted_under_its_name() {
    let _module = crate::support::serial::module(module_path!());
    let file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("hop-descriptor-{}.binpb", std::process::id()));
    std::fs::write(&file, HOP_DESCRIPTOR_SET).unwrap();
    let started = Arc::new(Notify::new());
    let service = serve_leaf(started.clone()).await;
    let mut proxy =
        Proxy::start(service, None, &["--descriptor-set", file.to_str().unwrap()]).await;
    // 601 `hop ended` lines: read, so that a full pipe never blocks the proxy.
    proxy.discard_stderr();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", proxy.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();

    // The method's first call ever: the service works, the caller leaves (its stream reset).
    let mut client = HopClient::new(channel.clone());
    let mut first = tonic::Request::new(CallRequest {
        work_ms: 30_000,
        ..Default::default()
    });
    first.set_timeout(Duration::from_secs(20));
    tokio::select! {
        _ = client.call(first) => panic!("the call answered; it was to be cancelled first"),
        ran = tokio::time::timeout(PATIENCE, started.notified()) => ran.expect("the service ran"),
    }
    let text = closed(&proxy, 1).await;
    let call = format!("route=\"{HOP_CALL_PATH}\"");
    assert_eq!(
        hops(&text, &format!("{call},outcome=\"cancelled\"")),
        1,
        "{text}"
    );
    assert_eq!(hops(&text, "route=\"other\""), 0, "{text}");

    // 600 made-up methods: tonic's router behind the proxy answers each UNIMPLEMENTED.
    for i in 0..300 {
        let code = call_path(channel.clone(), format!("/made.Up{i}/Method")).await;
        assert_eq!(code, tonic::Code::Unimplemented);
        let code = call_path(
            channel.clone(),
            format!("/hopbudget.testkit.Hop/Invented{i}"),
        )
        .await;
        assert_eq!(code, tonic::Code::Unimplemented);
    }
    let text = closed(&proxy, 601).await;
    assert_eq!(hops(&text, "route=\"other\""), 600, "{text}");
    let minted: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("hopbudget_") && l.contains("route=\""))
        .filter(|l| !l.contains("route=\"other\"") && !l.contains(&call))
        .collect();
    assert!(minted.is_empty(), "labels minted from outside: {minted:#?}");
    let _ = std::fs::remove_file(&file);
}
