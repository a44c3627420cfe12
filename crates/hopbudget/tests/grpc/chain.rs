//! A chain of real tonic servers on loopback: one budget that strictly shrinks hop by hop
//! (C2), read from `grpc-timeout` (and from nothing: the C8 fallback), visible to the handler
//! in the request extensions and ambiently (C11).
#![cfg(feature = "grpc")]

use std::time::Duration;

use crate::grpc_support::*;
use hopbudget::Profile;

#[tokio::test]
async fn budget_strictly_decreases_along_a_grpc_chain() {
    let c = serve_profile("c", Profile::default()).await;
    let b = serve_profile("b", Profile::default()).await;
    let a = serve_profile("a", Profile::default()).await;
    let client = grpc_client(&Profile::default(), &a.url());

    let start = budget(800);
    let reply = start
        .scope(async {
            let mut client = client;
            client.call(call(&[&b.url(), &c.url()], 0)).await
        })
        .await
        .expect("chain succeeds")
        .into_inner();

    assert_eq!(reply.remaining_us.len(), 3, "{reply:?}");
    assert_eq!(reply.source, ["grpc-timeout"; 3], "{reply:?}");
    // Every hop saw less than the one before it, and the first less than the client had.
    let mut previous = 800_000;
    for (hop, &seen) in reply.remaining_us.iter().enumerate() {
        assert!(
            seen < previous,
            "hop {hop} saw {seen} us, not less than {previous} us: {reply:?}"
        );
        // Each hop forwards at least margin + transit (6 ms) less than it had.
        assert!(previous - seen >= 6_000, "hop {hop}: {reply:?}");
        previous = seen;
    }
    // What went on the wire is the same budget, rounded down, in the most precise unit.
    for (hop, header) in reply.grpc_timeout.iter().enumerate() {
        let sent = hopbudget::codec::grpc_timeout::decode(header.as_bytes())
            .unwrap_or_else(|e| panic!("hop {hop} got `{header}`: {e}"));
        assert!(sent >= Duration::from_micros(reply.remaining_us[hop]));
        assert!(header.ends_with('u'), "{header}");
    }
    assert_eq!(
        (a.stats.entered(), b.stats.entered(), c.stats.entered()),
        (1, 1, 1)
    );
}

#[tokio::test]
async fn the_client_layer_replaces_a_grpc_timeout_set_by_hand() {
    let leaf = serve_profile("leaf", Profile::default()).await;
    let mut client = grpc_client(&Profile::default(), &leaf.url());
    let mut request = tonic::Request::new(call(&[], 0));
    // A hand-set, fresh 2 minute timeout would reset the budget (S13); the layer overrides it.
    request
        .metadata_mut()
        .insert("grpc-timeout", "2M".parse().unwrap());
    request.extensions_mut().insert(budget(300));
    let reply = client.call(request).await.unwrap().into_inner();
    let sent = hopbudget::codec::grpc_timeout::decode(reply.grpc_timeout[0].as_bytes()).unwrap();
    assert!(sent <= Duration::from_millis(294), "sent {sent:?}");
    assert!(reply.remaining_us[0] <= 294_000, "{reply:?}");
}

#[tokio::test]
async fn no_inbound_deadline_gets_the_edge_total_and_propagates_it() {
    // C8: a plain tonic client sends no grpc-timeout; the hop uses the profile's edge total.
    let leaf = serve_profile("leaf", Profile::default()).await;
    let edge = serve_profile("edge", Profile::default()).await;
    let reply = plain_client(&edge.url())
        .call(call(&[&leaf.url()], 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(reply.source, ["fallback", "grpc-timeout"], "{reply:?}");
    assert!(reply.remaining_us[0] <= 1_000_000, "{reply:?}");
    assert!(reply.remaining_us[0] > 500_000, "{reply:?}");
    assert!(reply.remaining_us[1] < reply.remaining_us[0], "{reply:?}");
    assert_eq!(reply.grpc_timeout[0], "", "the edge got no header");
}

/// #32, item 11: the edge default is exact over gRPC too: `edge_total_ms: 1500` and no
/// `grpc-timeout` is a hop that starts with 1,500 ms, not 1,499 (the server layer roots the
/// budget and its arrival value from one clock read).
#[tokio::test]
async fn the_edge_total_is_the_budget_at_arrival_to_the_millisecond() {
    let p = Profile::from_yaml("service: edge\nedge_total_ms: 1500\n", "p.yaml").unwrap();
    let edge = serve_profile("edge", p).await;
    plain_client(&edge.url()).call(call(&[], 0)).await.unwrap();
    assert_eq!(
        *edge.stats.arrived.lock().unwrap(),
        [Duration::from_millis(1_500)]
    );
}

#[tokio::test]
async fn a_client_outside_any_request_still_sends_a_finite_budget() {
    // C8 on the client side: no extension, no ambient budget: the edge total is forwarded.
    let leaf = serve_profile("leaf", Profile::default()).await;
    let reply = grpc_client(&Profile::default(), &leaf.url())
        .call(call(&[], 0))
        .await
        .unwrap()
        .into_inner();
    let sent = hopbudget::codec::grpc_timeout::decode(reply.grpc_timeout[0].as_bytes()).unwrap();
    assert!(
        sent <= Duration::from_millis(994) && sent > Duration::from_millis(500),
        "{sent:?}"
    );
}
