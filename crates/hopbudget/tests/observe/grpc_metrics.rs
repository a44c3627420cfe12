//! Each gRPC hop is observable (C14): the `hopbudget_*` metrics count completed, refused,
//! expired and cancelled calls, missing deadlines and malformed headers, per service and
//! method path. Read from the binary's one process-wide recorder
//! (`metrics_support::recorder()`), under service names (`m-*`) no other test uses.
#![cfg(all(feature = "grpc", feature = "metrics"))]

use std::time::Duration;

use crate::grpc_support::*;
use hopbudget::Profile;
use hopbudget_testkit::HOP_CALL_PATH;

fn count(text: &str, metric: &str, service: &str, extra: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")))
        .filter(|l| l.contains(&format!("service=\"{service}\"")) && l.contains(extra))
        .filter(|l| l.contains(&format!("route=\"{HOP_CALL_PATH}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test]
async fn every_grpc_outcome_is_counted() {
    let recorder = crate::metrics_support::recorder();

    // completed, and a missing deadline (C8)
    let ok = serve_profile("m-ok", Profile::default()).await;
    plain_client(&ok.url()).call(call(&[], 0)).await.unwrap();
    // refused (C3)
    let tax = serve(HopHandler::new(
        Profile::from_yaml(
            &format!(
                "service: m-refused\nroutes:\n  - path: {HOP_CALL_PATH}\n    min_budget_ms: 200\n"
            ),
            "t.yaml",
        )
        .unwrap(),
    ))
    .await;
    let _ = raw_call(tax.addr, &[("grpc-timeout", "120m")], &call(&[], 0)).await;
    // expired (C4). A method earns its label once the service answered it (C20): a call
    // that expires or is cancelled before any answer would be counted as `other` on a
    // server that never answered the method, so each server answers it once first.
    let slow = serve_profile("m-expired", Profile::default()).await;
    plain_client(&slow.url()).call(call(&[], 0)).await.unwrap();
    let _ = raw_call(slow.addr, &[("grpc-timeout", "100m")], &call(&[], 10_000)).await;
    // cancelled (C5)
    let leaf = serve_profile("m-cancelled", Profile::default()).await;
    plain_client(&leaf.url()).call(call(&[], 0)).await.unwrap();
    let mut client = grpc_client(&Profile::default(), &leaf.url());
    tokio::select! {
        _ = budget(5_000).scope(client.call(call(&[], 10_000))) => panic!("finished"),
        ran = leaf.stats.wait_for(Duration::from_secs(5), |s| s.live() == 1) => assert!(ran),
    }
    // malformed (C9)
    let bad = serve_profile("m-malformed", Profile::default()).await;
    plain_client(&bad.url()).call(call(&[], 0)).await.unwrap();
    let _ = raw_call(bad.addr, &[("grpc-timeout", "10s")], &call(&[], 0)).await;

    let settled = leaf
        .stats
        .wait_for(Duration::from_secs(1), |_| {
            count(
                &recorder.render(),
                "hopbudget_hops_total",
                "m-cancelled",
                "outcome=\"cancelled\"",
            ) > 0
        })
        .await;
    assert!(settled, "the cancelled hop was never closed");
    let text = recorder.render();
    let hops = |service: &str, outcome: &str| {
        count(
            &text,
            "hopbudget_hops_total",
            service,
            &format!("outcome=\"{outcome}\""),
        )
    };
    assert_eq!(hops("m-ok", "completed"), 1, "{text}");
    assert_eq!(
        count(&text, "hopbudget_deadline_missing_total", "m-ok", ""),
        1,
        "{text}"
    );
    assert_eq!(hops("m-refused", "refused"), 1, "{text}");
    assert_eq!(
        count(
            &text,
            "hopbudget_refused_before_work_total",
            "m-refused",
            ""
        ),
        1
    );
    assert_eq!(hops("m-expired", "expired"), 1, "{text}");
    assert_eq!(hops("m-expired", "cancelled"), 0, "{text}");
    assert_eq!(hops("m-cancelled", "cancelled"), 1, "{text}");
    assert_eq!(
        count(
            &text,
            "hopbudget_malformed_headers_total",
            "m-malformed",
            "header=\"grpc-timeout\""
        ),
        1,
        "{text}"
    );
    // Only `bad`'s first, well-formed call entered a handler.
    assert_eq!((tax.stats.entered(), bad.stats.entered()), (0, 1));
}
