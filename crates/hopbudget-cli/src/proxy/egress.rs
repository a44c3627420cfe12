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
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use hopbudget::clock::{SystemClock, WallClock};
use hopbudget::codec::read_inbound;
use hopbudget::http::client::CallTimeout;
use hopbudget::profile::Unmatched;
use hopbudget::{BudgetError, Outcome, Profile, SharedProfile};
use http::{HeaderValue, Method, Request, Response, StatusCode, Version};
use http_body_util::BodyExt;

use tower::util::MapRequest;
use tower::{Layer, Service, ServiceExt};

use super::answer;
use super::body::full;
use super::body::{FromCaller, ProxyBody};
use super::ingress::is_grpc;
use super::options::EgressAllow;
use super::options::UpstreamCarrier;
use super::registry::Registry;
use super::restate::{self, Stampers};
use super::spans::{self, EgressSpan, Spans};
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
    // `--otlp-endpoint`: each call's span (see `spans`).
    spans: Option<Spans>,
}

#[derive(Debug)]
struct Shared {
    profile: SharedProfile,
    // The last second an unmatched call was logged, and the ones left out since.
    unmatched_warned_s: AtomicU64,
    unmatched_quiet: AtomicU64,
    registry: Arc<Registry>,
    // Judge each destination against the profile's `outbound.trusted_hosts` (C19); one layer
    // per carrier the destination is told in.
    client: Stampers,
    // `--egress-allow`: the only destinations `--egress` calls; none set, any.
    allow: Vec<EgressAllow>,
}

impl Egress {
    /// The egress listeners' common parts; give each its [`Destination`] with [`to`](Self::to).
    pub(crate) fn new(
        profile: SharedProfile,
        registry: Arc<Registry>,
        carrier: UpstreamCarrier,
        idle: std::time::Duration,
        allow: Vec<EgressAllow>,
    ) -> Result<Self, String> {
        let client = Stampers::for_profile(profile.clone(), carrier);
        Ok(Self {
            shared: Arc::new(Shared {
                profile,
                unmatched_warned_s: AtomicU64::new(0),
                unmatched_quiet: AtomicU64::new(0),
                registry,
                client,
                allow,
            }),
            destination: Arc::new(Destination::Named(Box::new(http1_client(idle)?))),
            spans: None,
        })
    }

    /// Make a span of each call (`--otlp-endpoint`); `None` makes none.
    pub(crate) fn with_spans(self, spans: Option<Spans>) -> Self {
        Self { spans, ..self }
    }

    /// The same, for one destination.
    pub(crate) fn to(&self, destination: Destination) -> Self {
        Self {
            shared: self.shared.clone(),
            destination: Arc::new(destination),
            spans: self.spans.clone(),
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

impl Service<Request<FromCaller>> for Egress {
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ProxyBody>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<FromCaller>) -> Self::Future {
        let spans = self.spans.clone();
        Box::pin(call(
            self.shared.clone(),
            self.destination.clone(),
            req,
            spans,
        ))
    }
}

async fn call(
    shared: Arc<Shared>,
    destination: Arc<Destination>,
    mut req: Request<FromCaller>,
    spans: Option<Spans>,
) -> Result<Response<ProxyBody>, Infallible> {
    let grpc = is_grpc(&req);
    let profile = shared.profile.current();
    let found = shared.registry.find(req.headers());
    // C16: a deadline the service put on the call itself narrows the budget, never widens
    // it. Read once here and handed to the client layer as the call's own timeout, in the
    // request's extensions; every deadline header goes, and the client layer stamps once.
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
        req.extensions_mut().insert(CallTimeout(own));
    }
    let destination_host = match &*destination {
        Destination::Fixed(upstream) => Some(upstream.authority().to_string()),
        Destination::Named(_) => req.uri().authority().map(ToString::to_string),
    };
    // One line for this call however it ends, the caller leaving included (item 7).
    let mut record = CallRecord::new(destination_host, found.is_some());
    // Its span ends with its line, with the same outcome.
    record.span = spans.map(|spans| {
        spans.egress_call(
            &req,
            record.destination.as_deref(),
            found.as_ref().map(|f| &f.budget),
            found.as_ref().and_then(|f| f.ingress.as_ref()),
            profile.edge_total(),
        )
    });
    let unmatched = match found {
        Some(found) => {
            if found.ambiguous {
                count_ambiguous(profile.service());
            }
            req.extensions_mut().insert(found.budget);
            None
        }
        None => Some(shared.unmatched(&profile, record.destination())),
    };
    if unmatched == Some(Unmatched::Refuse) {
        // By callee, as the client layer counts the calls it sends with the edge total.
        let host = match &*destination {
            Destination::Fixed(upstream) => Some(upstream.authority().host()),
            Destination::Named(_) => req.uri().host(),
        };
        hopbudget::observe::outbound_missing_to(profile.service(), profile.trusted_hosts(), host);
        record.finish("refused", StatusCode::SERVICE_UNAVAILABLE.as_u16(), None);
        return Ok(unmatched_refusal(grpc));
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
                record.finish("refused", StatusCode::NOT_IMPLEMENTED.as_u16(), None);
                return Ok(connect_refusal(grpc));
            }
            let Some(authority) = req.uri().authority() else {
                record.finish("refused", StatusCode::BAD_REQUEST.as_u16(), None);
                return Ok(plain(
                    StatusCode::BAD_REQUEST,
                    "hopbudget proxy: the egress proxy needs an absolute URI \
                     (GET http://host:port/path); for one fixed destination use --egress-to\n",
                ));
            };
            // Not an open proxy: with an allow-list, nothing else leaves (#46 item 8).
            if !shared.allow.is_empty() && !shared.allow.iter().any(|a| a.admits(authority)) {
                record.finish("refused", StatusCode::FORBIDDEN.as_u16(), None);
                return Ok(plain_owned(
                    StatusCode::FORBIDDEN,
                    format!(
                        "hopbudget proxy: {authority} is not in the egress allow-list \
                         (--egress-allow)\n"
                    ),
                ));
            }
            strip_hop_by_hop(req.headers_mut(), grpc);
            *req.version_mut() = Version::HTTP_11;
            (**client).clone()
        }
    };
    let layer = if unmatched == Some(Unmatched::NoDeadline) {
        shared.client.untrusted()
    } else {
        shared.client.get(grpc)
    };
    let result = match record.span.as_ref().map(EgressSpan::told) {
        None => layer.layer(client).oneshot(req).await,
        Some(told) => {
            let noting = MapRequest::new(client, spans::noting_told(told));
            layer.layer(noting).oneshot(req).await
        }
    };
    match result {
        Ok(mut res) => {
            let status = res.status().as_u16();
            let outcome = answer_outcome(&profile, status, res.headers(), grpc);
            record.finish(outcome, status, None);
            if !grpc {
                strip_hop_by_hop(res.headers_mut(), false);
            }
            Ok(res.map(BodyExt::boxed_unsync))
        }
        Err(error) => {
            let outcome = BudgetError::find(&*error).map_or("error", |e| e.outcome().as_str());
            record.finish(outcome, 0, Some(error.to_string()));
            Ok(answer::failure(&error, &profile, grpc))
        }
    }
}

/// How an answer that came back ended, as the client layers read it: `completed` unless it
/// is marked (or, over HTTP, coded) as a deadline outcome.
fn answer_outcome(
    profile: &Profile,
    status: u16,
    headers: &http::HeaderMap,
    grpc: bool,
) -> &'static str {
    let outcome = if grpc {
        hopbudget::codec::marker::outcome(headers).unwrap_or(Outcome::Completed)
    } else {
        hopbudget::http::client::classify(profile.http_status(), status, headers)
    };
    outcome.as_str()
}

/// The `egress call ended` line of one call, written once: when the call ends, or, if the
/// service leaves first (the future is dropped), as `cancelled`.
struct CallRecord {
    destination: Option<String>,
    matched: bool,
    written: bool,
    // `--otlp-endpoint`: the call's span, ended with the line.
    span: Option<EgressSpan>,
}

impl CallRecord {
    fn new(destination: Option<String>, matched: bool) -> Self {
        Self {
            destination,
            matched,
            written: false,
            span: None,
        }
    }

    fn destination(&self) -> &str {
        self.destination.as_deref().unwrap_or("?")
    }

    fn finish(&mut self, outcome: &str, status: u16, error: Option<String>) {
        self.written = true;
        if let Some(span) = self.span.take() {
            span.finish(outcome, (status != 0).then_some(status), error.as_deref());
        }
        tracing::info!(
            target: "hopbudget::egress",
            destination = self.destination(),
            matched = self.matched,
            outcome,
            status,
            error,
            "egress call ended"
        );
    }
}

impl Drop for CallRecord {
    fn drop(&mut self) {
        if !self.written {
            self.finish("cancelled", 0, None);
        }
    }
}

/// More than one request in flight matched an outbound call; it got the tightest budget.
fn count_ambiguous(service: &str) {
    metrics::counter!(AMBIGUOUS_TOTAL, "service" => service.to_owned()).increment(1);
}

/// Counter: outbound calls whose trace context (or request id) matched more than one inbound
/// request in flight; each got the smallest remaining budget among them (C26).
pub(crate) const AMBIGUOUS_TOTAL: &str = "hopbudget_proxy_match_ambiguous_total";

impl Shared {
    /// The profile's choice for a call that matches no request in flight, logged at WARN
    /// with its destination, at most one line a second (a service that never forwards trace
    /// context would otherwise write one per call); the lines left out are counted on the next.
    fn unmatched(&self, profile: &Profile, destination: &str) -> Unmatched {
        let choice = profile.spec().sidecar.unmatched;
        let now_s = SystemClock.now_unix_ms() / 1000;
        let last = self.unmatched_warned_s.swap(now_s, Ordering::Relaxed);
        if last == now_s {
            self.unmatched_quiet.fetch_add(1, Ordering::Relaxed);
        } else {
            let left_out = self.unmatched_quiet.swap(0, Ordering::Relaxed);
            tracing::warn!(
                target: "hopbudget::egress",
                service = profile.service(),
                destination,
                unmatched = ?choice,
                left_out,
                "outbound call matched no inbound request in flight: the service does not forward \
                 trace context (traceparent, b3 or a request id) on this call, so its deadline is \
                 unknown (C26)"
            );
        }
        choice
    }
}

/// The answer to an unmatched call under `sidecar.unmatched: refuse`.
fn unmatched_refusal(grpc: bool) -> Response<ProxyBody> {
    const WHY: &str = "hopbudget proxy: this outbound call matched no inbound request in flight, \
        and the profile refuses such calls (sidecar.unmatched: refuse): forward the inbound \
        request's traceparent (or b3, or its request id) on every outbound call";
    if grpc {
        return answer::grpc_error(9, WHY);
    }
    plain(StatusCode::SERVICE_UNAVAILABLE, WHY)
}

/// The answer to `CONNECT` (an HTTPS tunnel, or a gRPC client that takes `http_proxy` for a
/// tunnel): what to do instead.
fn connect_refusal(grpc: bool) -> Response<ProxyBody> {
    const WHY: &str = "hopbudget proxy: CONNECT is not supported by the egress proxy: the \
        deadline headers of a tunnelled request cannot be read or written. For gRPC and h2c, \
        dial a --egress-to LISTEN=HOST:PORT listener instead of using http_proxy (grpcio: set \
        the channel option grpc.enable_http_proxy=0, or unset http_proxy for it); for HTTPS, \
        call the destination directly.";
    if grpc {
        return answer::grpc_error(14, WHY);
    }
    plain(StatusCode::NOT_IMPLEMENTED, WHY)
}

fn plain(status: StatusCode, text: &'static str) -> Response<ProxyBody> {
    plain_owned(status, text.to_owned())
}

fn plain_owned(status: StatusCode, text: String) -> Response<ProxyBody> {
    let mut res = Response::new(full(Bytes::from(text)));
    res.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    *res.status_mut() = status;
    res
}

#[cfg(test)]
mod allow_tests {
    use super::EgressAllow as Allowed;

    #[test]
    fn hosts_ports_and_domains_are_admitted_as_written() {
        let a = |t: &str| t.parse::<Allowed>().unwrap();
        let auth = |t: &str| t.parse::<http::uri::Authority>().unwrap();
        assert!(a("stock").admits(&auth("stock:8080")));
        assert!(a("stock:8080").admits(&auth("STOCK:8080")));
        assert!(!a("stock:8080").admits(&auth("stock:9090")));
        assert!(a("*.svc.local").admits(&auth("pay.svc.local:443")));
        assert!(!a("*.svc.local").admits(&auth("svc.local")));
        assert!(!a("*.svc.local").admits(&auth("evilsvc.local")));
        assert!(!a("stock").admits(&auth("stock.evil.example")));
        assert!("stock:port".parse::<Allowed>().is_err());
        assert!("".parse::<Allowed>().is_err());
    }
}
