//! HTTP hops: tower layers that carry the request budget into and out of a service.
//!
//! - [`server`]: [`ServerBudgetLayer`](server::ServerBudgetLayer) reads the inbound deadline
//!   headers, refuses work that cannot finish, bounds the handler by the deadline, and
//!   cancels the request's tree when the deadline passes or the client goes away (C1-C9,
//!   C13). Works with `axum::Router::layer` and any hyper/tower HTTP service.
//! - [`client`]: [`ClientBudgetLayer`](client::ClientBudgetLayer) stamps the forward budget on
//!   outbound requests, refuses calls that cannot finish, bounds the wait and aborts when the
//!   parent ends (C2-C8). Works with hyper-util's legacy `Client` and any tower HTTP client.
//! - `reqwest` (feature `reqwest`): the same client behaviour as a reqwest-middleware
//!   `Middleware`.
//! - With the feature `axum`, [`RequestBudget`](crate::RequestBudget) is an axum extractor.
//!
//! Responses a layer produces itself (refusal, expiry, malformed header) carry the header
//! [`x-deadline-outcome`](crate::status::REFUSED_METADATA) naming the outcome, so that a
//! caller can tell them apart even when a profile maps two outcomes to one status code.

pub mod client;
pub mod server;

#[cfg(feature = "reqwest")]
pub mod reqwest;

#[cfg(feature = "axum")]
mod extract;
#[cfg(feature = "axum")]
pub use extract::MissingBudget;

use http::HeaderName;

/// `x-deadline-outcome`: the outcome named by a response the layers made themselves.
pub(crate) static OUTCOME_HEADER: HeaderName =
    HeaderName::from_static(crate::status::REFUSED_METADATA);
/// `x-deadline-required-ms` on a refusal.
pub(crate) static REQUIRED_HEADER: HeaderName =
    HeaderName::from_static(crate::status::REQUIRED_MS_HEADER);
/// `x-deadline-remaining-ms` on a refusal.
pub(crate) static REMAINING_HEADER: HeaderName =
    HeaderName::from_static(crate::status::REMAINING_MS_HEADER);

/// The prefix of the layers' own markers (`x-deadline-outcome`, `x-deadline-required-ms`,
/// `x-deadline-remaining-ms`).
const MARKER_PREFIX: &str = "x-deadline-";

/// Remove every `x-deadline-*` header from an inbound request (C19): the markers are only
/// ever written by the layers on their answers, so one arriving on a request is forged, and a
/// handler or a downstream hop must not act on it. A request without one costs a scan of its
/// header names and no allocation.
pub(crate) fn strip_internal_markers(headers: &mut http::HeaderMap) {
    if !headers
        .keys()
        .any(|k| k.as_str().starts_with(MARKER_PREFIX))
    {
        return;
    }
    let forged: Vec<HeaderName> = headers
        .keys()
        .filter(|k| k.as_str().starts_with(MARKER_PREFIX))
        .cloned()
        .collect();
    for name in forged {
        headers.remove(&name);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn forged_markers_are_stripped_and_the_rest_kept() {
        let mut h = http::HeaderMap::new();
        h.insert("x-deadline-outcome", "refused".parse().unwrap());
        h.append("x-deadline-required-ms", "1".parse().unwrap());
        h.append("x-deadline-required-ms", "2".parse().unwrap());
        h.insert("x-request-timeout-ms", "400".parse().unwrap());
        h.insert("x-deadlines", "kept".parse().unwrap());
        super::strip_internal_markers(&mut h);
        let mut names: Vec<_> = h.keys().map(|k| k.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, ["x-deadlines", "x-request-timeout-ms"]);
    }
}
