//! Request hygiene at the ingress (issue #46 item 4): what the proxy will not pass to the
//! service, whatever the service's own parser would make of it.
//!
//! - **Two `Host` headers**: 400 (RFC 9112 §3.2). Which one a service reads depends on its
//!   stack, so each hop could route the request differently.
//! - **`CONNECT`**: 405 with a reason. A tunnel would carry requests the proxy never judged;
//!   outbound calls go through the egress (`--egress`, `--egress-to`) instead.
//! - **An underscore alias of a deadline header** (`x_request_timeout_ms`, `GRPC_TIMEOUT`,
//!   `x_deadline_outcome`): dropped before the service. CGI and WSGI map `_` and `-` to the
//!   same variable, so a Python service would read a forged budget beside the real one. nginx
//!   drops every underscore header (`underscores_in_headers off`); Envoy can
//!   (`headers_with_underscores_action`). The proxy drops only the aliases of the names it
//!   owns: the well-known carriers, the profile's own, and the answer markers.
//! - **A malformed body framing** (a chunk size that overflows, say): 400, the caller's
//!   error, not the service's (see [`answer::failure`](super::answer::failure)).
//!
//! None of these is `refused`: that means a budget too short (503, C3), which refusal alerts
//! watch. Each is counted in `hopbudget_proxy_hygiene_total{service, reason}`, as
//! `hopbudget_malformed_headers_total` counts malformed deadline headers.

use bytes::Bytes;
use hopbudget::codec::{self, marker};
use hopbudget::{Profile, SharedProfile};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, header};

use super::body::ProxyBody;
use super::body::full;

/// Requests the ingress answered itself or cleaned, by reason.
pub(crate) const HYGIENE_TOTAL: &str = "hopbudget_proxy_hygiene_total";

/// Why a request was answered here or cleaned (the `reason` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reason {
    DuplicateHost,
    Connect,
    UnderscoreAlias,
    MalformedBody,
    /// An `Upgrade` other than a WebSocket handshake (see `tunnel`).
    Upgrade,
}

impl Reason {
    fn label(self) -> &'static str {
        match self {
            Reason::DuplicateHost => "duplicate_host",
            Reason::Connect => "connect",
            Reason::UnderscoreAlias => "underscore_alias",
            Reason::MalformedBody => "malformed_body",
            Reason::Upgrade => "upgrade",
        }
    }
}

/// Count one request under `reason`.
pub(crate) fn count(profile: &Profile, reason: Reason) {
    metrics::counter!(
        HYGIENE_TOTAL,
        "service" => profile.service().to_owned(),
        "reason" => reason.label()
    )
    .increment(1);
}

/// Check `req` before anything reads it: `Some` answer when it must not go on; underscore
/// aliases of deadline headers are removed (and counted) in place.
pub(crate) fn check<B>(
    req: &mut Request<B>,
    profile: &SharedProfile,
) -> Option<Response<ProxyBody>> {
    if req.method() == Method::CONNECT {
        count(&profile.current(), Reason::Connect);
        let mut res = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "hopbudget proxy: CONNECT is not forwarded to the service: a tunnel would carry \
             requests the proxy never judged\n",
        );
        // Any other method is the service's to allow or not; the proxy names none.
        res.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static(""));
        return Some(res);
    }
    let headers = req.headers_mut();
    let mut hosts = headers.get_all(header::HOST).iter();
    if hosts.next().is_some() && hosts.next().is_some() {
        count(&profile.current(), Reason::DuplicateHost);
        return Some(text(
            StatusCode::BAD_REQUEST,
            "hopbudget proxy: two Host headers (RFC 9112 section 3.2)\n",
        ));
    }
    // Most requests have no underscore in any header name: one pass, nothing else.
    if headers.keys().any(|name| name.as_str().contains('_')) {
        let profile = profile.current();
        let aliases = aliases(headers, &profile);
        for name in aliases {
            headers.remove(&name);
            count(&profile, Reason::UnderscoreAlias);
        }
    }
    None
}

/// The header names in `headers` that, with `_` read as `-`, name a deadline carrier (a
/// well-known one or the profile's own) or an answer marker.
fn aliases(headers: &HeaderMap, profile: &Profile) -> Vec<HeaderName> {
    headers
        .keys()
        .filter(|name| {
            let name = name.as_str();
            if !name.contains('_') {
                return false;
            }
            let folded = name.replace('_', "-");
            codec::WELL_KNOWN.contains(&folded.as_str())
                || [marker::OUTCOME, marker::REQUIRED_MS, marker::REMAINING_MS]
                    .contains(&folded.as_str())
                || profile
                    .inbound()
                    .iter()
                    .any(|(_, carrier)| carrier.as_str() == folded)
        })
        .cloned()
        .collect()
}

fn text(status: StatusCode, body: &'static str) -> Response<ProxyBody> {
    let mut res = Response::new(full(Bytes::from_static(body.as_bytes())));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile() -> SharedProfile {
        SharedProfile::new(Profile::default())
    }

    #[test]
    fn underscore_aliases_of_deadline_headers_and_markers_are_dropped_and_others_kept() {
        let mut req = Request::builder()
            .header("x-request-timeout-ms", "993")
            .header("x_request_timeout_ms", "99999")
            .header("grpc_timeout", "1H")
            .header("x_deadline_outcome", "expired")
            .header("x_custom_thing", "kept")
            .body(())
            .unwrap();
        assert!(check(&mut req, &profile()).is_none());
        let names: Vec<&str> = req.headers().keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["x-request-timeout-ms", "x_custom_thing"]);
    }

    #[test]
    fn two_host_headers_and_connect_are_answered_here() {
        let mut two = Request::builder()
            .header("host", "a.example")
            .header("host", "b.example")
            .body(())
            .unwrap();
        let res = check(&mut two, &profile()).expect("answered");
        assert_eq!(res.status(), StatusCode::BAD_REQUEST);
        let mut one = Request::builder()
            .header("host", "a.example")
            .body(())
            .unwrap();
        assert!(check(&mut one, &profile()).is_none());
        let mut connect = Request::builder()
            .method(Method::CONNECT)
            .uri("evil.example:443")
            .body(())
            .unwrap();
        let res = check(&mut connect, &profile()).expect("answered");
        assert_eq!(res.status(), StatusCode::METHOD_NOT_ALLOWED);
    }
}
