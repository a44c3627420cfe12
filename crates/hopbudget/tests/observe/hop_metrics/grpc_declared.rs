//! A server given its descriptor set labels each real method from its first call (#50 item
//! 7, C20): the first call of `Hop/Call`, cancelled by its caller before the service answered
//! anything, is counted under `/hopbudget.testkit.Hop/Call`, arrival and end. Without the
//! descriptor set it would be `other` (nothing proved the method yet). Made-up methods, of
//! made-up services and of the real one, still mint nothing. A real tonic server behind
//! `GrpcServerLayer::with_methods`, on loopback, called through a real tonic Channel.
#![cfg(all(feature = "grpc", feature = "prometheus"))]

use std::time::Duration;

use super::grpc_delivered::tonic_call;
use crate::grpc_support::*;
use hopbudget::Profile;
use hopbudget::grpc::server::{DeclaredMethods, GrpcServerLayer};
use hopbudget_testkit::{HOP_CALL_PATH, HOP_DESCRIPTOR_SET};

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

/// Wait (real time, up to 10 s) until `service` has closed `n` hops.
async fn closed(service: &str, n: u64) {
    let end = tokio::time::Instant::now() + Duration::from_secs(10);
    while count("hopbudget_hops_total", service, "") < n && tokio::time::Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_declared_methods_first_call_cancelled_before_any_answer_has_its_own_label() {
    recorder();
    let service = "g-declared";
    let methods = DeclaredMethods::from_descriptor_set(HOP_DESCRIPTOR_SET).unwrap();
    assert!(methods.iter().any(|m| m == HOP_CALL_PATH), "{methods:?}");
    let handler = HopHandler::new(Profile::default().with_service(service));
    let layer = GrpcServerLayer::new(handler.profile.clone()).with_methods(&methods);
    let server = serve_with_layer(handler, layer).await;
    let channel = tonic::transport::Endpoint::from_shared(server.url())
        .unwrap()
        .connect()
        .await
        .unwrap();

    // The method's very first call: the handler works, the caller leaves (its stream reset).
    let mut client = hopbudget_testkit::pb::hop_client::HopClient::new(channel.clone());
    let mut first = tonic::Request::new(call(&[], 10_000));
    first.set_timeout(Duration::from_secs(5));
    tokio::select! {
        _ = client.call(first) => panic!("the call answered; it was to be cancelled first"),
        ran = server.stats.wait_for(Duration::from_secs(5), |s| s.live() == 1) => assert!(ran),
    }
    closed(service, 1).await;
    assert_eq!(
        count(
            "hopbudget_hops_total",
            service,
            &format!("route=\"{HOP_CALL_PATH}\",outcome=\"cancelled\"")
        ),
        1,
        "{}",
        recorder().render()
    );
    assert_eq!(
        count(
            "hopbudget_arrivals_total",
            service,
            &format!("route=\"{HOP_CALL_PATH}\"")
        ),
        1
    );
    assert_eq!(count("hopbudget_hops_total", service, "route=\"other\""), 0);

    // 600 made-up methods: of services that do not exist, and of the real service.
    for i in 0..300 {
        let code = tonic_call(channel.clone(), format!("/made.Up{i}/Method")).await;
        assert_eq!(code, tonic::Code::Unimplemented);
        let code = tonic_call(
            channel.clone(),
            format!("/hopbudget.testkit.Hop/Invented{i}"),
        )
        .await;
        assert_eq!(code, tonic::Code::Unimplemented);
    }
    closed(service, 601).await;
    assert_eq!(
        count("hopbudget_hops_total", service, "route=\"other\""),
        600
    );
    let text = recorder().render();
    let minted: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(&format!("service=\"{service}\"")))
        .filter(|l| {
            !l.contains("route=\"other\"") && !l.contains(&format!("route=\"{HOP_CALL_PATH}\""))
        })
        .filter(|l| !l.starts_with('#'))
        .collect();
    assert!(minted.is_empty(), "labels minted from outside: {minted:?}");
}
