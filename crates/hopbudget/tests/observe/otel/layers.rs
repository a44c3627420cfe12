//! The layers carry the trace context (feature `otel`): the HTTP client (reqwest
//! `BudgetMiddleware`) and gRPC client (`GrpcClientLayer`) inject it next to the deadline, and
//! the server layers (`ServerBudgetLayer`, `GrpcServerLayer`) make their hop span the child of
//! the caller's span. A three-hop chain over loopback becomes one trace whose hop spans form
//! the call chain, which is what `hopbudget audit` needs to rebuild it.
#![cfg(all(
    feature = "otel",
    feature = "reqwest",
    feature = "axum",
    feature = "grpc"
))]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use hopbudget::http::reqwest::BudgetMiddleware;
use hopbudget::http::server::ServerBudgetLayer;
use hopbudget::{Profile, RequestBudget};
use opentelemetry::trace::{SpanId, TracerProvider as _};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use reqwest_middleware::ClientBuilder;
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

#[derive(Clone, Debug, Default)]
struct Captured(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Captured {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.lock().unwrap().extend(batch);
        Ok(())
    }
}

impl Captured {
    /// The hop spans of `service`.
    fn hops_of(&self, service: &str) -> Vec<SpanData> {
        let want = KeyValue::new("service.name", Value::from(service.to_owned()));
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.attributes.contains(&want))
            .cloned()
            .collect()
    }

    fn named(&self, name: &str) -> SpanData {
        let spans = self.0.lock().unwrap();
        spans.iter().find(|s| s.name == name).cloned().unwrap()
    }
}

fn tracing_to(captured: &Captured) -> (impl tracing::Subscriber + Send + Sync, SdkTracerProvider) {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(captured.clone())
        .build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("test"));
    (tracing_subscriber::registry().with(layer), provider)
}

fn one(spans: Vec<SpanData>, service: &str) -> SpanData {
    assert_eq!(spans.len(), 1, "one hop span of {service}: {spans:#?}");
    spans.into_iter().next().unwrap()
}

fn assert_child(child: &SpanData, parent: &SpanData) {
    assert_eq!(
        child.span_context.trace_id(),
        parent.span_context.trace_id()
    );
    assert_eq!(child.parent_span_id, parent.span_context.span_id());
}

#[tokio::test(flavor = "current_thread")]
async fn http_hops_through_the_layers_form_one_trace() {
    let captured = Captured::default();
    let (subscriber, provider) = tracing_to(&captured);
    let _guard = tracing::subscriber::set_default(subscriber);

    let profile = |name: &str| Profile::default().with_service(name);
    let client = |p: &Profile| {
        ClientBuilder::new(reqwest::Client::new())
            .with(BudgetMiddleware::new(p.clone()))
            .build()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let tax = format!("http://{}", listener.local_addr().unwrap());
    let router = Router::new()
        .route("/tax", get(|| async { "ok" }))
        .layer(ServerBudgetLayer::new(profile("tax")));
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });

    let http = client(&profile("pricing"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let pricing = format!("http://{}", listener.local_addr().unwrap());
    let router = Router::new()
        .route(
            "/price",
            get(move || {
                let http = http.clone();
                let tax = tax.clone();
                async move {
                    let res = http.get(format!("{tax}/tax")).send().await.unwrap();
                    res.text().await.unwrap()
                }
            }),
        )
        .layer(ServerBudgetLayer::new(profile("pricing")));
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });

    let edge = client(&profile("edge"));
    let answer = RequestBudget::local(Duration::from_millis(800), Profile::default().policy())
        .scope(async { edge.get(format!("{pricing}/price")).send().await })
        .instrument(tracing::info_span!("edge calls pricing"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(answer, "ok");
    provider.force_flush().unwrap();

    let caller = captured.named("edge calls pricing");
    let pricing = one(captured.hops_of("pricing"), "pricing");
    let tax = one(captured.hops_of("tax"), "tax");
    assert_child(&pricing, &caller);
    assert_child(&tax, &pricing);
    assert_eq!(caller.parent_span_id, SpanId::INVALID);
}

#[tokio::test(flavor = "current_thread")]
async fn grpc_hops_through_the_layers_form_one_trace() {
    use crate::grpc_support::*;

    let captured = Captured::default();
    let (subscriber, provider) = tracing_to(&captured);
    let _guard = tracing::subscriber::set_default(subscriber);

    let c = serve_profile("c", Profile::default()).await;
    let b = serve_profile("b", Profile::default()).await;
    let a = serve_profile("a", Profile::default()).await;
    let mut client = grpc_client(&Profile::default(), &a.url());
    budget(800)
        .scope(async { client.call(call(&[&b.url(), &c.url()], 0)).await })
        .instrument(tracing::info_span!("client calls a"))
        .await
        .expect("chain succeeds");
    provider.force_flush().unwrap();

    let caller = captured.named("client calls a");
    let a = one(captured.hops_of("a"), "a");
    let b = one(captured.hops_of("b"), "b");
    let c = one(captured.hops_of("c"), "c");
    assert_child(&a, &caller);
    assert_child(&b, &a);
    assert_child(&c, &b);
}
