//! The bodies the proxy passes: every answer's ([`ProxyBody`], the service's or one the proxy
//! makes itself with [`full`]) and every request's ([`FromCaller`]). Below the ingress, the
//! egress and everything that answers, which all speak them.

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use tower::BoxError;

use super::caller_body;

/// The body of every answer the proxy sends: the service's, or one of its own.
pub(crate) type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// An answer body the proxy makes itself, whole: `bytes`.
pub(crate) fn full(bytes: Bytes) -> ProxyBody {
    use http_body_util::BodyExt;
    http_body_util::Full::new(bytes)
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// The body of every request the proxy passes on: the caller's, its reading bounded.
pub(crate) type FromCaller = caller_body::CallerBody<hyper::body::Incoming>;
