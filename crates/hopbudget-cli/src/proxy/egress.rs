//! The service's outbound calls through the proxy (issue #37 item 2): each call gets the
//! remaining budget of the inbound request it belongs to, found by the trace context the
//! service forwards ([`registry`](super::registry)), minus the margin (C2).
//!
//! Two ways in. `--egress ADDR` is an HTTP proxy for HTTP/1.1 (the service sets
//! `HTTP_PROXY=http://ADDR`; requests arrive in absolute form, `GET http://pricing/quote`).
//! `--egress-to LISTEN=HOST:PORT` is one listener per destination, for h2c and gRPC (the
//! service dials LISTEN for HOST:PORT), HTTP/1.1 too.
//!
//! Per call, through the library's client layer: the request's budget (or, for a call that
//! matches no request in flight, the profile's edge total, counted in
//! `hopbudget_deadline_missing_total{route="(outbound)"}`, C8), narrowed by a deadline the
//! service set on the call itself (C16); refused here below `refuse_below_ms` without a
//! connection (C3); stamped only for a destination the profile trusts, every deadline header
//! removed for the others (C19); the wait bounded, the reply classified (C4, C6, C10).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hopbudget::SharedProfile;
use hopbudget::clock::{SystemClock, WallClock};
use hopbudget::codec::read_inbound;
use hopbudget::http::client::ClientBudgetLayer;
use http::{HeaderValue, Method, Request, Response, StatusCode, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tower::util::MapRequest;
use tower::{Layer, Service, ServiceExt};

use super::ProxyBody;
use super::answer::{self, full};
use super::ingress::is_grpc;
use super::options::UpstreamCarrier;
use super::registry::Registry;
use super::restate;
use super::upstream::{Upstream, UpstreamClient, http1_client, strip_hop_by_hop};

/// Where an egress listener sends calls.
#[derive(Debug)]
pub(crate) enum Destination {
    /// An HTTP proxy: the request's absolute URI names the destination.
    Named(Box<UpstreamClient>),
    /// One fixed destination.
    Fixed(Box<Upstream>),
}

/// The service an egress listener runs.
#[derive(Debug, Clone)]
pub(crate) struct Egress {
    shared: Arc<Shared>,
    destination: Arc<Destination>,
}

#[derive(Debug)]
struct Shared {
    profile: SharedProfile,
    registry: Arc<Registry>,
    carrier: UpstreamCarrier,
    // Judges each destination against the profile's `outbound.trusted_hosts` (C19).
    client: ClientBudgetLayer,
}

impl Egress {
    /// The egress listeners' common parts; give each its [`Destination`] with [`to`](Self::to).
    pub(crate) fn new(
        profile: SharedProfile,
        registry: Arc<Registry>,
        carrier: UpstreamCarrier,
    ) -> Self {
        let client = ClientBudgetLayer::new(profile.clone());
        Self {
            shared: Arc::new(Shared {
                profile,
                registry,
                carrier,
                client,
            }),
            destination: Arc::new(Destination::Named(Box::new(http1_client()))),
        }
    }

    /// The same, for one destination.
    pub(crate) fn to(&self, destination: Destination) -> Self {
        Self {
            shared: self.shared.clone(),
            destination: Arc::new(destination),
        }
    }
}

// The service's outbound calls go to any destination: hyper-util's pool keeps their
// connections.
impl super::serve::PerConnection for Egress {
    fn for_connection(&self) -> Self {
        self.clone()
    }
}

impl Service<Request<Incoming>> for Egress {
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ProxyBody>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Incoming>) -> Self::Future {
        Box::pin(call(self.shared.clone(), self.destination.clone(), req))
    }
}

async fn call(
    shared: Arc<Shared>,
    destination: Arc<Destination>,
    mut req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    let grpc = is_grpc(&req);
    let profile = shared.profile.current();
    let found = shared.registry.find(req.headers());
    // C16: a deadline the service put on the call itself narrows the budget, never widens
    // it. Handed to the client layer in the profile's outbound carrier, which it reads as
    // the call's own timeout; every other deadline header goes.
    let own = read_inbound(
        req.headers(),
        profile.inbound(),
        profile.max(),
        &SystemClock,
    )
    .ok()
    .flatten()
    .map(|inbound| inbound.budget);
    restate::strip_carriers(req.headers_mut(), &profile);
    if let Some(own) = own {
        let (carrier, name) = profile.outbound_http();
        let value = restate::encode(carrier, own, || SystemClock.now_unix_ms());
        req.headers_mut().insert(name.clone(), value);
    }
    let matched = found.is_some();
    if let Some(budget) = found {
        req.extensions_mut().insert(budget);
    }
    let client = match &*destination {
        Destination::Fixed(upstream) => {
            let client = upstream.prepare(&mut req, grpc);
            // The service addressed the listener; the destination is told its own name, and
            // is judged by it (C19).
            if let Ok(host) = HeaderValue::from_str(upstream.authority().as_str()) {
                req.headers_mut().insert(http::header::HOST, host);
            }
            client
        }
        Destination::Named(client) => {
            if req.method() == Method::CONNECT {
                return Ok(plain(
                    StatusCode::NOT_IMPLEMENTED,
                    "hopbudget proxy: CONNECT (HTTPS) is not supported by the egress proxy: \
                     the deadline headers of a tunnelled request cannot be read or written",
                ));
            }
            if req.uri().authority().is_none() {
                return Ok(plain(
                    StatusCode::BAD_REQUEST,
                    "hopbudget proxy: the egress proxy needs an absolute URI \
                     (GET http://host:port/path); for one fixed destination use --egress-to",
                ));
            }
            strip_hop_by_hop(req.headers_mut(), grpc);
            *req.version_mut() = Version::HTTP_11;
            (**client).clone()
        }
    };
    let destination_host = req.uri().authority().map(ToString::to_string);
    let target = shared.carrier.for_request(grpc);
    let spell = restate::on_request(profile.clone(), target);
    let call = shared.client.layer(MapRequest::new(client, spell));
    let result = call.oneshot(req).await;
    let status = match &result {
        Ok(res) => res.status().as_u16(),
        Err(_) => 0,
    };
    tracing::info!(
        target: "hopbudget::egress",
        destination = destination_host.as_deref().unwrap_or("?"),
        matched,
        status,
        error = result.as_ref().err().map(|e| e.to_string()),
        "egress call ended"
    );
    match result {
        Ok(mut res) => {
            if !grpc {
                strip_hop_by_hop(res.headers_mut(), false);
            }
            Ok(res.map(BodyExt::boxed_unsync))
        }
        Err(error) => Ok(answer::failure(&error, &profile, grpc)),
    }
}

fn plain(status: StatusCode, text: &'static str) -> Response<ProxyBody> {
    let mut res = Response::new(full(Bytes::from_static(text.as_bytes())));
    *res.status_mut() = status;
    res
}
