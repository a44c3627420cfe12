//! The service behind the proxy: hyper-util's pooled client, over HTTP/1.1 or h2c, and the
//! few changes a request needs to travel one more hop (absolute URI, no hop-by-hop headers).
//!
//! Ending the service's request is dropping the client's response future: hyper then resets
//! the HTTP/2 stream (`RST_STREAM`), or closes the HTTP/1.1 connection the request was on (a
//! connection cannot be reused mid-request). Either is what the service's framework watches:
//! Go's `net/http` cancels `r.Context()` when its connection closes, grpc-go cancels the
//! call's context on a reset (C5, C7).

use http::header::{self, HeaderMap, HeaderName};
use http::uri::{Authority, PathAndQuery, Scheme, Uri};
use http::{Request, Version};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::options::UpstreamProtocol;
use super::restate::remove_where;

/// The client the proxy forwards with: one pool per protocol.
pub(crate) type UpstreamClient = Client<HttpConnector, Incoming>;

/// Where requests go and how.
#[derive(Debug, Clone)]
pub(crate) struct Upstream {
    authority: Authority,
    protocol: UpstreamProtocol,
    http1: UpstreamClient,
    h2c: UpstreamClient,
}

impl Upstream {
    pub(crate) fn new(authority: Authority, protocol: UpstreamProtocol) -> Self {
        let h2c = Client::builder(TokioExecutor::new())
            .http2_only(true)
            .build(connector());
        Self {
            authority,
            protocol,
            http1: http1_client(),
            h2c,
        }
    }

    /// The service's address.
    pub(crate) fn authority(&self) -> &Authority {
        &self.authority
    }

    /// The client for one request, after making the request fit it: the service's address in
    /// an absolute URI, the protocol version the client speaks, no hop-by-hop headers.
    pub(crate) fn prepare(&self, req: &mut Request<Incoming>, grpc: bool) -> UpstreamClient {
        let http2 = self.protocol.http2(grpc);
        let path = req
            .uri()
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(Scheme::HTTP);
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

/// A pooled HTTP/1.1 client.
pub(crate) fn http1_client() -> UpstreamClient {
    Client::builder(TokioExecutor::new()).build(connector())
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
    // One walk over the names (see `restate::remove_where`); the `Connection` header's list
    // is read only when there is one.
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
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
