//! One request through the proxy: the library's server layer in front, the library's client
//! layer behind, the service's own address at the end.
//!
//! ```text
//! caller ─> ServerBudget | GrpcServer ─> forward ─> ClientBudget ─────────────> hyper-util ─> service
//!           carriers read, clamped (C9)   carriers   budget from extensions
//!           malformed/expired/refused     stripped   forward budget, refuse (C3)
//!           answered here (C3, C18)                  stamped once, in the service's carrier
//!                                                    wait bounded (C2, S4)
//!           deadline: 504 / DEADLINE_EXCEEDED, the call below dropped (C4, C7)
//!           caller gone: cancelled, the call below dropped (C5)
//!           one outcome per hop, recorded by the hop guard (C14, C17)
//! ```
//!
//! gRPC calls (`content-type: application/grpc…`) go through the gRPC server layer, so they
//! are answered in gRPC's spelling (trailers-only, `grpc-status`) and the outcome is read from
//! the service's `grpc-status`; everything else through the HTTP layer.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hopbudget::grpc::server::{DeclaredMethods, GrpcServerLayer};
use hopbudget::http::client::ClientBudgetLayer;
use hopbudget::http::server::ServerBudgetLayer;
use hopbudget::{RequestBudget, SharedProfile};
use http::{Request, Response};
use http_body_util::BodyExt;

use tower::util::{BoxCloneService, MapRequest, Oneshot};
use tower::{Layer, Service, ServiceBuilder, ServiceExt};
use tracing::Instrument as _;

use super::answer;
use super::body::{FromCaller, ProxyBody};
use super::client_waits;
use super::hygiene;
use super::options::UpstreamCarrier;
use super::paired::Pairing;
use super::registry::Registry;
use super::restate::{self, Stampers};
use super::serve::PerConnection;
use super::spans::{self, IngressSpan, Spans};
use super::trace_context::Starter;
use super::tunnel;
use super::upstream::{Upstream, strip_hop_by_hop};
use super::upstream_limit;

type Stack = BoxCloneService<Request<FromCaller>, Response<ProxyBody>, Infallible>;

/// The service hyper runs for every request the proxy accepts.
#[derive(Clone)]
pub(crate) struct Ingress {
    http: Stack,
    grpc: Stack,
    forwarder: Arc<Forwarder>,
    // This caller connection's own connection to the service (see `paired`); none in the
    // copy the listener clones from.
    pairing: Option<Pairing>,
    // `--otlp-endpoint`: each request's ingress span (see `spans`).
    spans: Option<Spans>,
}

impl std::fmt::Debug for Ingress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ingress").finish_non_exhaustive()
    }
}

/// What forwarding one request needs, shared by every request.
#[derive(Debug)]
struct Forwarder {
    profile: SharedProfile,
    upstream: Upstream,
    // The service behind a sidecar is internal by definition: the budget always goes to it
    // (C19's trust list is for the service's own outbound calls). One layer per carrier.
    client: Stampers,
    // Set when the service's outbound calls come back through the proxy (egress): admitted
    // requests are findable by their trace context while their answer is being sent.
    registry: Option<Arc<Registry>>,
    // Set with the registry: a request without trace context or request id gets one, so its
    // outbound calls can be matched (C26). Without an egress nothing would read it, and the
    // service's own spans would name a parent no one exports.
    starter: Option<Starter>,
    // `--tunnel-max`: how long a WebSocket connection lives after its handshake.
    tunnel_max: std::time::Duration,
}

impl Ingress {
    pub(crate) fn new(
        profile: SharedProfile,
        upstream: Upstream,
        carrier: UpstreamCarrier,
        registry: Option<Arc<Registry>>,
        starter: Option<Starter>,
        tunnel_max: std::time::Duration,
        methods: &DeclaredMethods,
    ) -> Self {
        let forwarder = Arc::new(Forwarder {
            client: Stampers::new(ClientBudgetLayer::new(profile.clone()).trust_all(), carrier),
            profile: profile.clone(),
            upstream,
            registry,
            starter,
            tunnel_max,
        });
        let to = |grpc: bool| {
            let forwarder = forwarder.clone();
            tower::service_fn(move |req| forward(forwarder.clone(), req, grpc))
        };
        let http = ServiceBuilder::new()
            .map_response(|res: Response<_>| res.map(BodyExt::boxed_unsync))
            .layer(ServerBudgetLayer::new(profile.clone()))
            .service(to(false));
        let grpc = ServiceBuilder::new()
            .map_response(|res: Response<_>| res.map(BodyExt::boxed_unsync))
            // `--descriptor-set`: the service's methods are labelled from their first call.
            .layer(GrpcServerLayer::new(profile).with_methods(methods))
            .service(to(true));
        Self {
            http: BoxCloneService::new(http),
            grpc: BoxCloneService::new(grpc),
            forwarder,
            pairing: None,
            spans: None,
        }
    }

    /// Make a span of each request (`--otlp-endpoint`); `None` makes none.
    pub(crate) fn with_spans(self, spans: Option<Spans>) -> Self {
        Self { spans, ..self }
    }
}

impl PerConnection for Ingress {
    fn for_connection(&self) -> Self {
        Self {
            pairing: Some(self.forwarder.upstream.pairing()),
            ..self.clone()
        }
    }
}

/// The ingress's future: an answer made at the door (see `hygiene`), or the request's way
/// through the stack.
// Nearly every request is a `Call`, the large variant: boxing it would cost an allocation per
// request to shrink the rare answer made at the door.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum IngressFuture {
    Answered(Option<Response<ProxyBody>>),
    Call(spans::Traced<Oneshot<Stack, Request<FromCaller>>>),
}

impl Future for IngressFuture {
    type Output = Result<Response<ProxyBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            IngressFuture::Call(call) => Pin::new(call).poll(cx),
            IngressFuture::Answered(res) => {
                Poll::Ready(Ok(res.take().expect("polled after it answered")))
            }
        }
    }
}

impl Service<Request<FromCaller>> for Ingress {
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = IngressFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request<FromCaller>) -> Self::Future {
        // Before anything reads it: what must not reach the service (#46 item 4), and an
        // `Upgrade` (#46 item 6).
        if let Some(answer) = hygiene::check(&mut req, &self.forwarder.profile) {
            return IngressFuture::Answered(Some(answer));
        }
        if let Some(answer) = tunnel::inspect(&mut req) {
            hygiene::count(&self.forwarder.profile.current(), hygiene::Reason::Upgrade);
            return IngressFuture::Answered(Some(answer));
        }
        // The request's span, when spans are made: the hop opens inside it. It comes first, so
        // that a request without trace context is given this span's (not one that no one
        // exports). Without spans, nothing: the stack's own future.
        let traced = self.spans.as_ref().map(|spans| spans.ingress(&mut req));
        // Before the server layer reads the request: its hop line and span name the trace.
        if let Some(starter) = &self.forwarder.starter {
            starter.ensure(req.headers_mut());
        }
        // An HTTP/1.x caller's requests come one after another: they share one connection to
        // the service. HTTP/2 callers' streams run side by side and take the pooled client.
        if let Some(pairing) = &self.pairing {
            if req.version() <= http::Version::HTTP_11 {
                req.extensions_mut().insert(pairing.clone());
            }
        }
        let stack = if is_grpc(&req) {
            &self.grpc
        } else {
            &self.http
        };
        let call = stack.clone().oneshot(req);
        IngressFuture::Call(match traced {
            None => spans::Traced::Plain(call),
            Some((span, ingress)) => {
                spans::Traced::Spanned(spans::Answered::new(call.instrument(span), Some(ingress)))
            }
        })
    }
}

/// gRPC over HTTP/2 (`application/grpc`, `application/grpc+proto`, ...); gRPC-Web is HTTP
/// with its trailers in the body and takes the HTTP path.
pub(crate) fn is_grpc<B>(req: &Request<B>) -> bool {
    req.headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| {
            ct.starts_with("application/grpc") && !ct.starts_with("application/grpc-web")
        })
}

/// Pass an admitted request on to the service; its budget is in the request's extensions,
/// where the server layer put it.
async fn forward(
    forwarder: Arc<Forwarder>,
    mut req: Request<FromCaller>,
    grpc: bool,
) -> Result<Response<ProxyBody>, Infallible> {
    let profile = forwarder.profile.current();
    // The answer is written under the request's budget (#46 item 2).
    let answer_by = req.extensions().get::<RequestBudget>().cloned();
    // The service's own calls are made under what the service is told, the forward budget,
    // so each hop below is told less again (C2): not under the proxy's larger remainder.
    let registration = match (&forwarder.registry, req.extensions().get::<RequestBudget>()) {
        (Some(registry), Some(budget)) => {
            let told = budget.deadline().saturating_sub(budget.policy().reserve());
            let ingress = IngressSpan::of(req.extensions());
            registry.register_with(req.headers(), &budget.child_until(told), ingress)
        }
        _ => None,
    };
    restate::strip_carriers(req.headers_mut(), &profile);
    let mut pairing = req.extensions_mut().remove::<Pairing>();
    // A WebSocket handshake takes the pooled client: its connection leaves with the tunnel.
    let websocket = req.extensions_mut().remove::<tunnel::WebSocket>();
    if websocket.is_some() {
        pairing = None;
    }
    let client = forwarder.upstream.prepare_call(&mut req, grpc, pairing);
    if let Some(websocket) = &websocket {
        websocket.restore_request(req.headers_mut());
    }
    let layer = forwarder.client.get(grpc);
    // With spans, what the service is told is noted on its ingress span, from the stamp.
    let told = IngressSpan::of(req.extensions()).map(IngressSpan::told);
    // Dropping this future (the deadline passed, or the caller left) drops hyper's: the
    // stream is reset or the connection closed, and the service's handler is cancelled.
    let result = match told {
        None => layer.layer(client).oneshot(req).await,
        Some(told) => {
            let noting = MapRequest::new(client, spans::noting_told(told));
            layer.layer(noting).oneshot(req).await
        }
    };
    match result {
        Ok(mut res) => {
            if !grpc {
                strip_hop_by_hop(res.headers_mut(), false);
            }
            match websocket {
                Some(websocket) => websocket.open(&mut res, forwarder.tunnel_max),
                None => {
                    if let Some(budget) = answer_by {
                        res.extensions_mut().insert(client_waits::AnswerBy(budget));
                    }
                }
            }
            // A pooled connection's place under `--upstream-max-connections` is held until
            // the service's answer has been read to its end.
            let held = res.extensions_mut().remove::<upstream_limit::Held>();
            // Findable until the answer is out: a service may call out while it streams.
            Ok(res.map(|body| {
                body.map_frame(move |frame| {
                    let _ = (&registration, &held);
                    frame
                })
                .boxed_unsync()
            }))
        }
        Err(error) => Ok(answer::failure(&error, &profile, grpc)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_is_told_by_its_content_type() {
        let req = |ct: &str| {
            Request::builder()
                .header("content-type", ct)
                .body(())
                .unwrap()
        };
        assert!(is_grpc(&req("application/grpc")));
        assert!(is_grpc(&req("application/grpc+proto")));
        assert!(!is_grpc(&req("application/grpc-web+proto")));
        assert!(!is_grpc(&req("application/json")));
        assert!(!is_grpc(&Request::new(())));
    }
}
