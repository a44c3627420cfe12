//! Rule C14 in practice: the OTLP export of a real tonic call holds the hops, not the transport.
//! Unfiltered, one call through `GrpcClientLayer` to a `GrpcServerLayer` server exports
//! h2/hyper/tonic internals by the hundred; through `otlp::default_filter` (what
//! `otlp::install` uses) it exports the hop span and the application's own spans only.
#![cfg(all(feature = "grpc", feature = "otlp"))]

use std::path::PathBuf;

use crate::grpc_support::*;
use hopbudget::Profile;
use hopbudget::observe::otlp::{self, OtlpFile, proto};
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt;

fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("hopbudget-{name}-{}.jsonl", std::process::id()))
}

fn target(span: &proto::Span) -> String {
    span.attributes
        .iter()
        .find(|kv| kv.key == "target")
        .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
            proto::Value::StringValue(s) => Some(s.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// One tonic call (client layer -> server layer -> handler) under a subscriber exporting to
/// `path`, filtered or not; returns every exported span as (name, target).
async fn one_call(path: &PathBuf, filtered: bool) -> Vec<(String, String)> {
    let otlp = OtlpFile::create(path, "filter-test").unwrap();
    let layer = otlp.layer();
    let subscriber = tracing_subscriber::registry().with(if filtered {
        layer.with_filter(otlp::default_filter()).boxed()
    } else {
        layer.boxed()
    });
    {
        // A current-thread runtime: every task of the server and the client runs on this
        // thread, under this subscriber.
        let _default = tracing::subscriber::set_default(subscriber);
        let server = serve_profile("orders", Profile::default()).await;
        tracing::info_span!("checkout")
            .in_scope(|| async {
                budget(500)
                    .scope(grpc_client(&Profile::default(), &server.url()).call(call(&[], 0)))
                    .await
                    .unwrap();
            })
            .await;
        drop(server);
        tokio::task::yield_now().await;
    }
    otlp.shutdown().unwrap();
    let spans = otlp::read(path)
        .unwrap()
        .into_iter()
        .flat_map(|r| r.resource_spans)
        .flat_map(|rs| rs.scope_spans)
        .flat_map(|ss| ss.spans)
        .map(|s| (s.name.clone(), target(&s)))
        .collect();
    std::fs::remove_file(path).unwrap();
    spans
}

#[tokio::test]
async fn the_default_filter_exports_the_hops_not_the_http2_internals() {
    let all = one_call(&temp_path("unfiltered"), false).await;
    let kept = one_call(&temp_path("filtered"), true).await;
    println!(
        "one tonic call: {} spans unfiltered, {} through the default filter: {kept:?}",
        all.len(),
        kept.len()
    );

    let transport = |(_, t): &&(String, String)| {
        otlp::TRANSPORT_TARGETS
            .iter()
            .any(|p| t == p || t.starts_with(&format!("{p}::")))
    };
    assert!(
        all.iter().filter(transport).count() >= 20,
        "unfiltered, the transport's spans are there to filter: {all:?}"
    );
    assert_eq!(kept.iter().filter(transport).count(), 0, "{kept:?}");
    assert!(
        kept.iter()
            .any(|(name, _)| name == hopbudget_testkit::HOP_CALL_PATH),
        "the server hop's span is kept: {kept:?}"
    );
    assert!(
        kept.iter().any(|(name, _)| name == "checkout"),
        "the application's own span is kept: {kept:?}"
    );
    assert!(kept.len() <= 6, "a handful, not hundreds: {kept:?}");
}
