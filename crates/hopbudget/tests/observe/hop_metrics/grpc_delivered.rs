//! What a gRPC hop records, read from the Prometheus recorder as a dashboard reads it, with
//! a real tonic server behind `GrpcServerLayer` on loopback and real tonic and raw HTTP/2
//! calls:
//!
//! - a unary answer is `completed` once its trailers were handed over, though hyper drops
//!   the body then without polling it to its end (C17, C14); a service below the layer that
//!   fails is not `completed`;
//! - a method earns its own label only once the service answered it as a method it has:
//!   calls to made-up methods, which tonic's router answers UNIMPLEMENTED, all share
//!   `other`, and a real method called for the first time after hundreds of them still gets
//!   its own label (C20).
//!
//! The recorder is process-wide and installed once; each test has its own service name.
#![cfg(all(feature = "grpc", feature = "prometheus"))]

use std::time::Duration;

use crate::grpc_support::*;
use hopbudget::Profile;
use hopbudget_testkit::HOP_CALL_PATH;
use hopbudget_testkit::pb::{CallReply, CallRequest};

use crate::metrics_support::recorder;

/// The sum of `metric`'s series for `service` whose labels contain `extra`.
fn count(metric: &str, service: &str, extra: &str) -> u64 {
    recorder()
        .render()
        .lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")))
        .filter(|l| l.contains(&format!("service=\"{service}\",")) && l.contains(extra))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

fn hops(service: &str, route: &str, outcome: &str) -> u64 {
    count(
        "hopbudget_hops_total",
        service,
        &format!("route=\"{route}\",outcome=\"{outcome}\""),
    )
}

/// Wait (real time, up to 5 s) until `service` has closed `n` hops.
async fn closed(service: &str, n: u64) {
    let end = tokio::time::Instant::now() + Duration::from_secs(5);
    while count("hopbudget_hops_total", service, "") < n && tokio::time::Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A unary answer is data, then trailers; hyper's HTTP/2 writer drops the body once the
/// trailers are sent. The hop ends `completed` there, never `cancelled`.
#[tokio::test]
async fn a_unary_answer_is_completed_once_its_trailers_are_handed_over() {
    recorder();
    let server = serve_profile("g-unary", Profile::default()).await;
    let mut client = plain_client(&server.url());
    for _ in 0..3 {
        let mut req = tonic::Request::new(call(&[], 0));
        req.set_timeout(Duration::from_secs(2));
        client.call(req).await.unwrap();
    }
    closed("g-unary", 3).await;
    assert_eq!(hops("g-unary", HOP_CALL_PATH, "completed"), 3);
    assert_eq!(
        count("hopbudget_hops_total", "g-unary", "outcome=\"cancelled\""),
        0
    );
}

/// A tonic client for any method path, made-up ones included.
pub(crate) async fn tonic_call(channel: tonic::transport::Channel, path: String) -> tonic::Code {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let codec = tonic_prost::ProstCodec::<CallRequest, CallReply>::default();
    let path = http::uri::PathAndQuery::try_from(path).unwrap();
    match grpc
        .unary(tonic::Request::new(call(&[], 0)), path, codec)
        .await
    {
        Ok(_) => tonic::Code::Ok,
        Err(status) => status.code(),
    }
}

/// 600 made-up methods (more than the cap of distinct methods), through tonic and raw HTTP/2:
/// each is answered UNIMPLEMENTED by tonic's router and counted under `other`. Then the real
/// method, never called before, gets its own label for its arrival and its end.
#[tokio::test]
async fn made_up_methods_mint_no_labels_and_a_real_method_gets_its_own() {
    recorder();
    let server = serve_profile("g-labels", Profile::default()).await;
    let channel = tonic::transport::Endpoint::from_shared(server.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    for i in 0..300 {
        let code = tonic_call(channel.clone(), format!("/made.Up{i}/Method")).await;
        assert_eq!(code, tonic::Code::Unimplemented);
    }
    for i in 0..300 {
        let raw = raw_call_path(
            server.addr,
            &format!("/hop.Hop/Invented{i}"),
            &[("grpc-timeout", "2S")],
            &call(&[], 0),
        )
        .await;
        assert_eq!(raw.grpc_status.as_deref(), Some("12"));
    }
    closed("g-labels", 600).await;
    let all = recorder().render();
    let mine: Vec<&str> = all
        .lines()
        .filter(|l| l.contains("g-labels") && l.contains("hops_total"))
        .take(8)
        .collect();
    assert_eq!(hops("g-labels", "other", "completed"), 600, "{mine:#?}");
    assert_eq!(
        count("hopbudget_arrivals_total", "g-labels", "route=\"other\""),
        600
    );

    let mut client = plain_client(&server.url());
    client.call(call(&[], 0)).await.unwrap();
    closed("g-labels", 601).await;
    assert_eq!(hops("g-labels", HOP_CALL_PATH, "completed"), 1);
    assert_eq!(
        count(
            "hopbudget_arrivals_total",
            "g-labels",
            &format!("route=\"{HOP_CALL_PATH}\"")
        ),
        1,
        "the arrival is in the method's series too"
    );
    // Not one series for a made-up method, in any metric.
    let text = recorder().render();
    let minted: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("service=\"g-labels\""))
        .filter(|l| {
            !l.contains("route=\"other\"") && !l.contains(&format!("route=\"{HOP_CALL_PATH}\""))
        })
        .filter(|l| !l.starts_with('#'))
        .collect();
    assert!(minted.is_empty(), "labels minted from outside: {minted:?}");
}

/// A service below the layer that fails (here tower's own `Timeout`, set shorter than the
/// work) sends no answer of its own: tonic makes a status from the error outside the layer.
/// The hop is not `completed`: it ends as an abandoned call, `cancelled` with budget left.
#[tokio::test]
async fn a_failed_service_below_the_layer_is_not_completed() {
    recorder();
    let handler = HopHandler::new(Profile::default().with_service("g-fail"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let layer = hopbudget::grpc::server::GrpcServerLayer::new(handler.profile.clone());
    let task = tokio::spawn(async move {
        tonic::transport::Server::builder()
            .layer(layer)
            .layer(tower::timeout::TimeoutLayer::new(Duration::from_millis(50)))
            .add_service(hopbudget_testkit::pb::hop_server::HopServer::new(handler))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await
            .unwrap();
    });
    let mut client = plain_client(&format!("http://{addr}"));
    let mut req = tonic::Request::new(call(&[], 2_000));
    req.set_timeout(Duration::from_secs(5));
    let status = client.call(req).await.unwrap_err();
    assert_ne!(status.code(), tonic::Code::Ok);
    closed("g-fail", 1).await;
    assert_eq!(
        count("hopbudget_hops_total", "g-fail", "outcome=\"completed\""),
        0
    );
    assert_eq!(
        count("hopbudget_hops_total", "g-fail", "outcome=\"cancelled\""),
        1
    );
    task.abort();
}
