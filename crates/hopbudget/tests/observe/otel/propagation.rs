//! Trace context across the wire (feature `otel`): a caller's span context goes out as W3C
//! `traceparent` through the installed propagator and the callee's hop span (hopbudget's
//! `Hop`) continues the trace as its child, over a real axum server with a reqwest client,
//! and over a real tonic server and client, on loopback.
#![cfg(feature = "otel")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::routing::get;
use hopbudget::observe::{Hop, HopLabels, Protocol, propagation};
use hopbudget::{HopPolicy, Outcome, RequestBudget};
use hopbudget_testkit::pb::hop_client::HopClient;
use hopbudget_testkit::pb::hop_server::{Hop as HopService, HopServer};
use hopbudget_testkit::pb::{CallReply, CallRequest};
use http::HeaderMap;
use opentelemetry::trace::{SpanId, TraceId, TracerProvider as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

/// Keeps every exported span.
#[derive(Clone, Debug, Default)]
struct Captured(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Captured {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.lock().unwrap().extend(batch);
        Ok(())
    }
}

impl Captured {
    fn span(&self, name: &str) -> SpanData {
        let spans = self.0.lock().unwrap();
        let found = spans.iter().find(|s| s.name == name).cloned();
        found.unwrap_or_else(|| {
            let names: Vec<_> = spans.iter().map(|s| s.name.clone()).collect();
            panic!("no span {name:?} among {names:?}")
        })
    }
}

/// A subscriber exporting to `Captured` as each span ends, with W3C trace context installed.
fn tracing_to(captured: &Captured) -> (impl tracing::Subscriber + Send + Sync, SdkTracerProvider) {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(captured.clone())
        .build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("test"));
    (tracing_subscriber::registry().with(layer), provider)
}

/// The callee's side: open the hop span, continue the caller's trace, finish.
fn serve_hop(service: &str, route: &str, protocol: Protocol, headers: &HeaderMap) -> bool {
    let labels = HopLabels::new(service, route, protocol);
    let budget = RequestBudget::local(Duration::from_millis(200), HopPolicy::DEFAULT);
    let hop = Hop::start(&labels, &budget);
    let linked = propagation::set_parent(hop.span(), headers);
    hop.span()
        .in_scope(|| tracing::info!("handler runs in the hop span"));
    hop.finish(Outcome::Completed);
    linked
}

fn assert_child(child: &SpanData, parent: &SpanData) {
    assert_eq!(
        child.span_context.trace_id(),
        parent.span_context.trace_id(),
        "same trace"
    );
    assert_eq!(
        child.parent_span_id,
        parent.span_context.span_id(),
        "child of the caller"
    );
    assert!(child.parent_span_is_remote, "the parent came over the wire");
}

#[tokio::test(flavor = "current_thread")]
async fn an_http_hop_span_is_the_child_of_its_callers_span_across_the_wire() {
    let captured = Captured::default();
    let (subscriber, provider) = tracing_to(&captured);
    let _guard = tracing::subscriber::set_default(subscriber);

    let app = axum::Router::new().route(
        "/tax",
        get(|headers: HeaderMap| async move {
            serve_hop("tax", "/tax", Protocol::Http, &headers).to_string()
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let client = reqwest::Client::new();

    let call = |with_context: bool| {
        let client = client.clone();
        async move {
            let mut headers = HeaderMap::new();
            if with_context {
                propagation::inject_current(&mut headers);
            }
            client
                .get(format!("http://{addr}/tax"))
                .headers(headers)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        }
    };
    let linked = call(true)
        .instrument(tracing::info_span!("pricing calls tax"))
        .await;
    assert_eq!(linked, "true");
    provider.force_flush().unwrap();
    assert_child(&captured.span("/tax"), &captured.span("pricing calls tax"));

    // No trace context sent: the hop span starts its own trace, as before.
    captured.0.lock().unwrap().clear();
    assert_eq!(call(false).await, "false");
    provider.force_flush().unwrap();
    assert_eq!(captured.span("/tax").parent_span_id, SpanId::INVALID);
}

#[derive(Debug)]
struct Tax;

#[tonic::async_trait]
impl HopService for Tax {
    async fn call(
        &self,
        request: tonic::Request<CallRequest>,
    ) -> Result<tonic::Response<CallReply>, tonic::Status> {
        let headers = request.metadata().clone().into_headers();
        let linked = serve_hop(
            "tax",
            "/hopbudget.testkit.Hop/Call",
            Protocol::Grpc,
            &headers,
        );
        Ok(tonic::Response::new(CallReply {
            tag: linked.to_string(),
            ..CallReply::default()
        }))
    }

    type WatchStream = futures_util::stream::Empty<Result<CallReply, tonic::Status>>;

    async fn watch(
        &self,
        _: tonic::Request<CallRequest>,
    ) -> Result<tonic::Response<Self::WatchStream>, tonic::Status> {
        Err(tonic::Status::unimplemented("not in this test"))
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_grpc_hop_span_is_the_child_of_its_callers_span_across_the_wire() {
    let captured = Captured::default();
    let (subscriber, provider) = tracing_to(&captured);
    let _guard = tracing::subscriber::set_default(subscriber);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(HopServer::new(Tax))
            .serve_with_incoming(tokio_stream_of(listener))
            .await
            .unwrap();
    });
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = HopClient::new(channel);

    let reply = async {
        let mut headers = HeaderMap::new();
        propagation::inject_current(&mut headers);
        let mut request = tonic::Request::new(CallRequest::default());
        *request.metadata_mut() = tonic::metadata::MetadataMap::from_headers(headers);
        client.call(request).await.unwrap().into_inner()
    }
    .instrument(tracing::info_span!("pricing calls tax over grpc"))
    .await;
    assert_eq!(reply.tag, "true");
    provider.force_flush().unwrap();
    let hop = captured.span("/hopbudget.testkit.Hop/Call");
    let caller = captured.span("pricing calls tax over grpc");
    assert_child(&hop, &caller);
    assert_ne!(hop.span_context.trace_id(), TraceId::INVALID);
}

/// The accepted connections of `listener`, as tonic's `serve_with_incoming` takes them.
fn tokio_stream_of(
    listener: tokio::net::TcpListener,
) -> impl futures_util::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures_util::stream::unfold(listener, |l| async move {
        let conn = l.accept().await.map(|(s, _)| s);
        Some((conn, l))
    })
}
