//! The service behind the proxy: over HTTP/1.1 on the caller connection's own connection
//! ([`paired`](super::paired)), or with hyper-util's pooled client (h2c, HTTP/2 callers, the
//! egress proxy), and the few changes a request needs to travel one more hop (the URI's form,
//! no hop-by-hop headers).
//!
//! Ending the service's request is dropping the client's response future: hyper then resets
//! the HTTP/2 stream (`RST_STREAM`), or closes the HTTP/1.1 connection the request was on (a
//! connection cannot be reused mid-request). Either is what the service's framework watches:
//! Go's `net/http` cancels `r.Context()` when its connection closes, grpc-go cancels the
//! call's context on a reset (C5, C7).

use http::header::{self, HeaderMap, HeaderName};
use http::uri::{Authority, PathAndQuery, Scheme, Uri};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{HeaderValue, Request, Response, Version};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;

use super::origination::{self, Connector, Origination};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tower::{BoxError, Service};

use super::body::FromCaller;
use super::options::UpstreamProtocol;
use super::paired::{Connections, Pairing};
use super::restate::remove_where;
use super::upstream_limit::UpstreamLimit;

/// The client the proxy forwards with: one pool per protocol.
pub(crate) type UpstreamClient = Client<Connector, FromCaller>;

/// Where requests go and how.
#[derive(Debug, Clone)]
pub(crate) struct Upstream {
    authority: Authority,
    // `https` with TLS to the service (see `origination`), else `http`.
    scheme: Scheme,
    protocol: UpstreamProtocol,
    http1: UpstreamClient,
    h2c: UpstreamClient,
    connections: Arc<Connections>,
    // `--upstream-max-connections`, for the service behind the ingress (not for egress
    // destinations: their callers are the service's own).
    limit: Option<UpstreamLimit>,
}

impl Upstream {
    /// The service at `authority`, spoken to in TLS with `tls`; an error names what in the
    /// TLS settings is wrong.
    pub(crate) fn new(
        authority: Authority,
        protocol: UpstreamProtocol,
        idle: Duration,
        tls: Option<Origination>,
    ) -> Result<Self, String> {
        let h2c = pooled(idle)
            .http2_only(true)
            .build(origination::connector(connector(), tls.as_ref())?);
        let http1 = pooled(idle).build(origination::connector(connector(), tls.as_ref())?);
        Ok(Self {
            scheme: if tls.is_some() {
                Scheme::HTTPS
            } else {
                Scheme::HTTP
            },
            connections: Connections::new(authority.clone(), tls),
            authority,
            protocol,
            http1,
            h2c,
            limit: None,
        })
    }

    /// Bound the pooled HTTP/1.1 calls to the service (see `upstream_limit`).
    pub(crate) fn with_limit(self, limit: UpstreamLimit) -> Self {
        Self {
            limit: Some(limit),
            ..self
        }
    }

    /// The service's address.
    pub(crate) fn authority(&self) -> &Authority {
        &self.authority
    }

    /// A new caller connection's own connection to the service (made on its first request).
    pub(crate) fn pairing(&self) -> Pairing {
        self.connections.pairing()
    }

    /// The call for one request of the ingress, after making the request fit it: on the
    /// caller connection's own connection (`pairing`, given for an HTTP/1.x caller) when the
    /// service is spoken to in HTTP/1.1, else as [`prepare`](Self::prepare).
    pub(crate) fn prepare_call(
        &self,
        req: &mut Request<FromCaller>,
        grpc: bool,
        pairing: Option<Pairing>,
    ) -> Call {
        let pairing = match pairing {
            Some(pairing) if !self.protocol.http2(grpc) => pairing,
            _ => {
                let client = Box::new(self.prepare(req, grpc));
                return match &self.limit {
                    Some(limit) if !self.protocol.http2(grpc) => {
                        Call::Limited(client, limit.clone())
                    }
                    _ => Call::Pooled(client),
                };
            }
        };
        // Origin-form (`/path?query`): what a connection to the service itself is sent.
        if req.uri().scheme().is_some() || req.uri().authority().is_some() {
            let path = req
                .uri()
                .path_and_query()
                .cloned()
                .unwrap_or_else(|| PathAndQuery::from_static("/"));
            *req.uri_mut() = Uri::from(path);
        }
        strip_hop_by_hop(req.headers_mut(), grpc);
        // The caller's `Host` goes on, as hyper-util's client leaves it; an HTTP/1.0 caller
        // may have sent none, and HTTP/1.1 requires one.
        if !req.headers().contains_key(header::HOST) {
            if let Ok(host) = HeaderValue::from_str(self.authority.as_str()) {
                req.headers_mut().insert(header::HOST, host);
            }
        }
        *req.version_mut() = Version::HTTP_11;
        Call::Paired(pairing)
    }

    /// The client for one request, after making the request fit it: the service's address in
    /// an absolute URI, the protocol version the client speaks, no hop-by-hop headers.
    pub(crate) fn prepare(&self, req: &mut Request<FromCaller>, grpc: bool) -> UpstreamClient {
        let http2 = self.protocol.http2(grpc);
        let path = req
            .uri()
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(self.scheme.clone());
        parts.authority = Some(self.authority.clone());
        parts.path_and_query = Some(path);
        if let Ok(uri) = Uri::from_parts(parts) {
            *req.uri_mut() = uri;
        }
        strip_hop_by_hop(req.headers_mut(), grpc);
        if http2 {
            *req.version_mut() = Version::HTTP_2;
            self.h2c.clone()
        } else {
            *req.version_mut() = Version::HTTP_11;
            self.http1.clone()
        }
    }
}

/// The call to the service for one request: see [`Upstream::prepare_call`].
pub(crate) enum Call {
    // Boxed: hyper-util's client is some 300 bytes, the pairing one pointer.
    Pooled(Box<UpstreamClient>),
    /// Pooled HTTP/1.1, under `--upstream-max-connections`.
    Limited(Box<UpstreamClient>, UpstreamLimit),
    Paired(Pairing),
}

type CallFuture = Pin<Box<dyn Future<Output = Result<Response<Incoming>, BoxError>> + Send>>;

impl Service<Request<FromCaller>> for Call {
    type Response = Response<Incoming>;
    type Error = BoxError;
    type Future = CallFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match self {
            Self::Pooled(client) | Self::Limited(client, _) => {
                Service::<Request<FromCaller>>::poll_ready(client, cx).map_err(Into::into)
            }
            // Readiness is the connection's, awaited in the call: a request waits for it
            // inside its budget.
            Self::Paired(_) => Poll::Ready(Ok(())),
        }
    }

    fn call(&mut self, req: Request<FromCaller>) -> CallFuture {
        match self {
            Self::Pooled(client) => {
                let call = client.call(req);
                Box::pin(async move { call.await.map_err(Into::into) })
            }
            Self::Limited(client, limit) => {
                let (mut client, limit) = ((**client).clone(), limit.clone());
                Box::pin(async move {
                    // Waiting here is inside the request's budget (C4).
                    let held = limit.hold().await;
                    let mut res = client.call(req).await?;
                    res.extensions_mut().insert(held);
                    Ok(res)
                })
            }
            Self::Paired(pairing) => Box::pin(pairing.clone().send(req)),
        }
    }
}

/// A pooled HTTP/1.1 client, plain HTTP only, whose idle connections close after `idle`.
pub(crate) fn http1_client(idle: Duration) -> Result<UpstreamClient, String> {
    Ok(pooled(idle).build(origination::connector(connector(), None)?))
}

/// Idle connections kept per destination, at most: a burst of HTTP/2 streams to an HTTP/1.1
/// service opens a connection per stream, and they need not all wait for the next burst.
const MAX_IDLE_PER_HOST: usize = 32;

/// The pooled clients' settings: idle connections close after `idle` (hyper-util's idle
/// timeout needs a timer; without one they stayed open for ever, #46 item 3), and at most
/// [`MAX_IDLE_PER_HOST`] wait.
fn pooled(idle: Duration) -> hyper_util::client::legacy::Builder {
    let mut builder = Client::builder(TokioExecutor::new());
    builder
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(idle)
        .pool_max_idle_per_host(MAX_IDLE_PER_HOST);
    builder
}

fn connector() -> HttpConnector {
    let mut connector = HttpConnector::new();
    // Loopback sidecar traffic: small writes must not wait for Nagle.
    connector.set_nodelay(true);
    connector
}

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1): a proxy removes
/// them, and the ones the `Connection` header names. HTTP/2 forbids them outright. gRPC's
/// `te: trailers` is end to end and stays.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap, grpc: bool) {
    // One walk over the names (see `restate::remove_where`). The `Connection` header's list
    // names `keep-alive` or `close` on most HTTP/1.1 messages, which go anyway: only other
    // names are collected, so the list allocates only when there is one.
    let mut named: Vec<HeaderName> = Vec::new();
    for value in &headers.get_all(header::CONNECTION) {
        let Ok(value) = value.to_str() else { continue };
        for token in value.split(',').map(str::trim) {
            let gone_anyway = ["close", "keep-alive", "upgrade", "proxy-connection", ""]
                .iter()
                .any(|known| token.eq_ignore_ascii_case(known));
            if !gone_anyway {
                if let Ok(name) = HeaderName::from_bytes(token.as_bytes()) {
                    named.push(name);
                }
            }
        }
    }
    remove_where(headers, |name| {
        name == header::CONNECTION
            || name == header::PROXY_AUTHORIZATION
            || name == header::TRANSFER_ENCODING
            || name == header::UPGRADE
            || name.as_str() == "keep-alive"
            || name.as_str() == "proxy-connection"
            || (!grpc && name == header::TE)
            || named.contains(name)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_go_and_grpc_keeps_te_trailers() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, "keep-alive, x-secret".parse().unwrap());
        h.insert("keep-alive", "timeout=5".parse().unwrap());
        h.insert("x-secret", "1".parse().unwrap());
        h.insert(header::TE, "trailers".parse().unwrap());
        h.insert("x-kept", "1".parse().unwrap());
        let mut grpc = h.clone();
        strip_hop_by_hop(&mut h, false);
        assert_eq!(
            h.keys().map(HeaderName::as_str).collect::<Vec<_>>(),
            ["x-kept"]
        );
        strip_hop_by_hop(&mut grpc, true);
        assert!(grpc.contains_key(header::TE) && !grpc.contains_key("x-secret"));
    }
}
