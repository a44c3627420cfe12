//! The sidecar's spans (issue #45 item 3, rule C26): each request it admits or refuses and each
//! outbound call it carries is an OpenTelemetry span in the request's trace, with the budget it
//! was told, so a trace shows what each service was given and not only what its caller sent.
//!
//! Built only with `--otlp-endpoint` ([`export`](super::export) sends them); without it the
//! proxy makes no span, allocates nothing for one, and its log lines are unchanged.
//!
//! One file, though long: the ingress and the egress span share one tracer, one set of
//! attribute names and the request's told budget, and each half is read against the other.
//!
//! # The ingress span (kind SERVER)
//!
//! The library's server layer records the hop on its own `tracing` span (`hop`, with the
//! `deadline.*` fields of [`hopbudget::observe::fields`]); the proxy does not compute them a
//! second time. [`Spans::ingress`] starts the OpenTelemetry span as the request arrives, whose
//! parent is the caller's `traceparent` when it is valid, and gives back a `tracing` span to
//! run the stack in; the hop span opens under it, and [`HopSpans`], a `tracing` layer, copies
//! the hop's fields onto the OpenTelemetry span and ends it when the hop ends. Its attributes:
//!
//! | attribute | value |
//! |---|---|
//! | `hopbudget.proxy` | `ingress` |
//! | `deadline.remaining_ms`, `deadline.source`, `deadline.margin_ms`, `deadline.outcome`, `deadline.required_ms` (refused), `deadline.overrun_ms`, `deadline.unenforced` | the hop span's, as the library records them |
//! | `deadline.told_ms` | what the service was told; absent when nothing was stamped |
//! | `http.request.method`, `url.path` | the request's |
//! | `http.response.status_code` (or `rpc.grpc.status_code`) | what the caller was answered |
//!
//! The span is named after the hop's route, its status is Error for every outcome but
//! `completed`, and its resource's `service.name` is the profile's service. The service is
//! given it as its parent when it is sampled (exported); a request without trace context is
//! given its ids either way, before the ingress's trace starter looks (#45 item 1). A request answered
//! 400 for a malformed deadline header opens no hop: its span has no `deadline.*` attribute.
//!
//! # The egress span (kind CLIENT)
//!
//! [`Spans::egress`]: `hopbudget.proxy = egress`, `deadline.remaining_ms` (the matched
//! request's remaining budget as the call starts, or the edge total for a call matched to no
//! request), `deadline.told_ms` (what the destination was told; absent when nothing was
//! stamped, as for an untrusted host), `deadline.matched`, `deadline.outcome`,
//! `server.address` and `server.port`, `http.request.method`, `http.response.status_code`. Its
//! parent is the span the service put on the call (its own client span), else the ingress
//! span of the request it was matched to. It ends with the call's `egress call ended` line and
//! its outcome (`cancelled` for a call the service abandoned, `error` for one that could not
//! be made).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use hopbudget::clock::{SystemClock, WallClock};
use hopbudget::codec::Carrier;
use hopbudget::observe::fields;
use http::{HeaderMap, HeaderValue, Request};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{
    Span as _, SpanContext, SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_http::HeaderExtractor;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, Span as SdkSpan};
use tracing::Subscriber;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{FilterFn, Filtered};
use tracing_subscriber::layer::Context as LayerContext;
use tracing_subscriber::registry::LookupSpan;

/// Which side of the sidecar a span is: `ingress` or `egress`.
pub(crate) const PROXY: &str = "hopbudget.proxy";
/// What the service (ingress) or the destination (egress) was told, in ms.
pub(crate) const TOLD_MS: &str = "deadline.told_ms";
/// Whether an egress call was matched to an inbound request.
pub(crate) const MATCHED: &str = "deadline.matched";

/// The target of the library's hop spans.
const HOP_TARGET: &str = "hopbudget::observe::hop";
/// The target of the `tracing` span an ingress request runs in, under which its hop opens.
pub(crate) const INGRESS_TARGET: &str = "hopbudget_cli::proxy::spans";

/// Makes the sidecar's spans; one per proxy, cloned into each listener.
#[derive(Debug, Clone)]
pub(crate) struct Spans {
    tracer: SdkTracer,
    propagator: TraceContextPropagator,
}

impl Spans {
    /// Spans made with `provider`'s tracer.
    pub(crate) fn new(provider: &SdkTracerProvider) -> Self {
        Self {
            tracer: provider.tracer("hopbudget-proxy"),
            propagator: TraceContextPropagator::new(),
        }
    }

    /// The caller's trace context in `headers` (W3C `traceparent`, `tracestate`), or a root
    /// context when there is none or it is not valid.
    fn parent(&self, headers: &HeaderMap) -> Context {
        self.propagator.extract(&HeaderExtractor(headers))
    }

    /// Start the ingress span of `req` and put its handle, an [`IngressSpan`], in the
    /// request's extensions; the handle, and the `tracing` span to run the request's stack in:
    /// the hop span the server layer opens under it fills in and ends the ingress span.
    pub(crate) fn ingress<B>(&self, req: &mut Request<B>) -> (tracing::Span, IngressSpan) {
        let parent = self.parent(req.headers());
        let span = self
            .tracer
            .span_builder("ingress")
            .with_kind(SpanKind::Server)
            .with_attributes([
                KeyValue::new(PROXY, "ingress"),
                KeyValue::new("http.request.method", req.method().as_str().to_owned()),
                KeyValue::new("url.path", req.uri().path().to_owned()),
            ])
            .start_with_context(&self.tracer, &parent);
        let handle = IngressSpan(Arc::new(IngressShared {
            context: span.span_context().clone(),
            told: Arc::default(),
            answered: AtomicU16::new(NO_STATUS),
            answered_grpc: AtomicU16::new(NO_STATUS),
        }));
        req.extensions_mut().insert(handle.clone());
        // What the service sees as its parent (#45 item 1, C26): this span when it is exported;
        // and a request that came without trace context gets this span's, exported or not, so
        // that its outbound calls are matched and no trace names a parent that was never
        // sent. B3 trace context is left as it came (the egress matches on it).
        let came_with_context = parent.span().span_context().is_valid()
            || req.headers().contains_key("b3")
            || req.headers().contains_key("x-b3-traceid");
        if !came_with_context || handle.context().is_sampled() {
            req.headers_mut()
                .insert(TRACEPARENT, traceparent(handle.context()));
        }
        let link = tracing::span!(target: INGRESS_TARGET, tracing::Level::INFO, "ingress");
        let record = IngressRecord {
            span,
            handle: handle.clone(),
            hop: Vec::new(),
            route: None,
            outcome: None,
            has_status: false,
        };
        // The record lives in the `tracing` span's extensions, where `HopSpans` finds it from
        // the hop span. Without the proxy's subscriber (none installed) it is dropped here,
        // and the SDK ends the span as it is.
        link.with_subscriber(move |(id, dispatch)| {
            if let Some(registry) = dispatch.downcast_ref::<tracing_subscriber::Registry>() {
                if let Some(span) = registry.span(id) {
                    span.extensions_mut().insert(record);
                }
            }
        });
        (link, handle)
    }

    /// Start the span of one egress call with `headers` (the service's outbound request).
    /// `matched` is the budget of the request it was matched to, `ingress` finds that
    /// request's span; `edge_total` stands for the budget of an unmatched call.
    fn egress(
        &self,
        headers: &HeaderMap,
        call: EgressCall<'_>,
        matched: Option<&hopbudget::RequestBudget>,
        ingress: impl FnOnce() -> Option<IngressSpan>,
        edge_total: Duration,
    ) -> EgressSpan {
        let mut parent = self.parent(headers);
        // Looked up only for a call without trace context, matched by its request id.
        if !parent.span().span_context().is_valid() && matched.is_some() {
            if let Some(ingress) = ingress() {
                parent = Context::new().with_remote_span_context(ingress.context().clone());
            }
        }
        let remaining = matched.map_or(edge_total, hopbudget::RequestBudget::remaining);
        let mut attributes = vec![
            KeyValue::new(PROXY, "egress"),
            KeyValue::new(fields::REMAINING_MS, millis(remaining)),
            KeyValue::new(MATCHED, matched.is_some()),
            KeyValue::new("http.request.method", call.method.to_owned()),
        ];
        if let Some(host) = call.host {
            attributes.push(KeyValue::new("server.address", host.to_owned()));
        }
        if let Some(port) = call.port {
            attributes.push(KeyValue::new("server.port", i64::from(port)));
        }
        let span = self
            .tracer
            .span_builder(call.method.to_owned())
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &parent);
        EgressSpan {
            span: Some(span),
            told: Arc::new(Told::default()),
        }
    }

    /// Start the span of an egress call: `matched` is the budget of the request it was
    /// matched to (`None`: the edge total stands for it), `ingress` that request's span, the
    /// parent when the call carries no trace context.
    pub(crate) fn egress_call<B>(
        &self,
        req: &Request<B>,
        destination: Option<&str>,
        matched: Option<&hopbudget::RequestBudget>,
        ingress: Option<&IngressSpan>,
        edge_total: Duration,
    ) -> EgressSpan {
        let authority = destination.and_then(|d| d.parse::<http::uri::Authority>().ok());
        self.egress(
            req.headers(),
            EgressCall {
                method: req.method().as_str(),
                host: authority.as_ref().map(http::uri::Authority::host),
                port: authority.as_ref().and_then(http::uri::Authority::port_u16),
            },
            matched,
            || ingress.cloned(),
            edge_total,
        )
    }

    /// The `tracing` layer that fills in and ends the ingress spans (see the module docs),
    /// filtered to the spans it reads so that it sees nothing else.
    pub(crate) fn layer<S>() -> Filtered<HopSpans, FilterFn, S>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        HopSpans.with_filter(FilterFn::new(|meta| {
            meta.is_span()
                && (meta.target() == INGRESS_TARGET
                    || (meta.target() == HOP_TARGET && meta.name() == fields::HOP_SPAN))
        }))
    }
}

/// What an egress call is, for its span.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EgressCall<'a> {
    /// The request's method.
    pub(crate) method: &'a str,
    /// The destination's host, when known.
    pub(crate) host: Option<&'a str>,
    /// The destination's port, when known.
    pub(crate) port: Option<u16>,
}

/// A request's ingress span, in the request's extensions while the proxy forwards it.
#[derive(Debug, Clone)]
pub(crate) struct IngressSpan(Arc<IngressShared>);

#[derive(Debug)]
struct IngressShared {
    context: SpanContext,
    told: Arc<Told>,
    // The answer's status as it left, for a hop whose span has none (an early answer).
    answered: AtomicU16,
    answered_grpc: AtomicU16,
}

impl IngressSpan {
    /// The ingress span of the request whose extensions these are; `None` when spans are off.
    pub(crate) fn of(extensions: &http::Extensions) -> Option<&Self> {
        extensions.get::<Self>()
    }

    /// The span's context: trace id (the caller's, or a new one when the caller sent no
    /// valid `traceparent`), span id, and whether it is sampled (the caller's flag; sampled
    /// for a new trace).
    pub(crate) fn context(&self) -> &SpanContext {
        &self.0.context
    }

    /// The `traceparent` naming this span as the parent, for the request to the service:
    /// `Some` only when the span is sampled, hence exported (a service must not be given a
    /// parent that never reaches the collector).
    // `Spans::ingress` writes it into the request to the service itself; kept for callers
    // that need the header without the request (and for its test).
    #[cfg_attr(not(test), expect(dead_code))]
    pub(crate) fn traceparent(&self) -> Option<HeaderValue> {
        self.0
            .context
            .is_sampled()
            .then(|| traceparent(&self.0.context))
    }

    /// Where [`noting_told`] notes what the service is told.
    pub(crate) fn told(&self) -> Arc<Told> {
        self.0.told.clone()
    }
}

/// W3C Trace Context's header.
const TRACEPARENT: &str = "traceparent";

/// `cx` as a `traceparent` value: `00-<trace id>-<span id>-<flags>`.
fn traceparent(cx: &SpanContext) -> HeaderValue {
    let text = format!(
        "00-{}-{}-{:02x}",
        cx.trace_id(),
        cx.span_id(),
        cx.trace_flags().to_u8()
    );
    HeaderValue::from_str(&text).expect("hex digits and dashes are a valid header value")
}

/// No status noted yet.
const NO_STATUS: u16 = u16::MAX;

/// The ingress stack's future, noting the answer's status on the request's ingress span when
/// there is one (a refusal's hop span records none); otherwise it only passes the answer on.
#[derive(Debug)]
pub(crate) struct Answered<F> {
    inner: F,
    span: Option<IngressSpan>,
}

impl<F> Answered<F> {
    /// `inner`, noting its answer on `span`.
    pub(crate) fn new(inner: F, span: Option<IngressSpan>) -> Self {
        Self { inner, span }
    }
}

impl<F, B, E> Future for Answered<F>
where
    F: Future<Output = Result<http::Response<B>, E>> + Unpin,
{
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let ready = std::task::ready!(Pin::new(&mut self.inner).poll(cx));
        if let (Some(span), Ok(res)) = (self.span.take(), &ready) {
            span.0
                .answered
                .store(res.status().as_u16(), Ordering::Relaxed);
            let grpc = res
                .headers()
                .get("grpc-status")
                .and_then(|v| v.to_str().ok()?.parse::<u16>().ok());
            if let Some(code) = grpc {
                span.0.answered_grpc.store(code, Ordering::Relaxed);
            }
        }
        Poll::Ready(ready)
    }
}

/// The ingress's future: the stack's own when spans are off, so that their cost per request
/// is one branch; with spans, run in the request's `tracing` span and noting its answer.
#[derive(Debug)]
pub(crate) enum Traced<F> {
    /// Spans are off.
    Plain(F),
    /// Spans are on.
    Spanned(Answered<tracing::instrument::Instrumented<F>>),
}

impl<F, B, E> Future for Traced<F>
where
    F: Future<Output = Result<http::Response<B>, E>> + Unpin,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Traced::Plain(inner) => Pin::new(inner).poll(cx),
            Traced::Spanned(inner) => Pin::new(inner).poll(cx),
        }
    }
}

/// What a span's peer was told, in ms: set once the carrier is written.
#[derive(Debug)]
pub(crate) struct Told(AtomicU64);

impl Default for Told {
    fn default() -> Self {
        Self(AtomicU64::new(Told::NONE))
    }
}

impl Told {
    const NONE: u64 = u64::MAX;

    /// Read the budget stamped in `carrier` in `headers`; nothing stamped, nothing noted.
    pub(crate) fn note(&self, headers: &HeaderMap, carrier: Carrier) {
        let Some(value) = headers.get(carrier.default_header()) else {
            return;
        };
        if let Ok(told) = carrier.decode(value.as_bytes(), || SystemClock.now_unix_ms()) {
            let ms = u64::try_from(told.as_millis()).unwrap_or(Told::NONE - 1);
            self.0.store(ms, Ordering::Relaxed);
        }
    }

    /// Read the stamp in whichever carrier the client layer wrote it.
    pub(crate) fn note_stamp(&self, headers: &HeaderMap) {
        if let Some(carrier) = STAMPS
            .into_iter()
            .find(|c| headers.contains_key(c.default_header()))
        {
            self.note(headers, carrier);
        }
    }

    fn get(&self) -> Option<i64> {
        match self.0.load(Ordering::Relaxed) {
            Told::NONE => None,
            ms => Some(i64::try_from(ms).unwrap_or(i64::MAX)),
        }
    }
}

/// Below the client layer: note on `told` what the peer is told, as the client layer stamped
/// it (every other deadline header was removed before, so the one there is the stamp).
pub(crate) fn noting_told<B>(told: Arc<Told>) -> impl Fn(Request<B>) -> Request<B> + Clone {
    move |req| {
        told.note_stamp(req.headers());
        req
    }
}

/// The carriers a stamp may be in.
const STAMPS: [Carrier; 5] = [
    Carrier::RelativeMs,
    Carrier::GrpcTimeout,
    Carrier::EpochMs,
    Carrier::Envoy,
    Carrier::Connect,
];

/// One egress call's span: [`finish`](Self::finish) it with the call's end; dropped unfinished
/// (the service abandoned the call), it ends `cancelled`.
#[derive(Debug)]
pub(crate) struct EgressSpan {
    span: Option<SdkSpan>,
    told: Arc<Told>,
}

impl EgressSpan {
    /// The cell [`noting_told`] fills with what the destination is told.
    pub(crate) fn told(&self) -> Arc<Told> {
        self.told.clone()
    }

    /// End the span: the call ended with `outcome`, the destination answering `status`
    /// (`None`: no answer), `error` when it could not be made.
    pub(crate) fn finish(mut self, outcome: &str, status: Option<u16>, error: Option<&str>) {
        self.end(outcome, status, error);
    }

    fn end(&mut self, outcome: &str, status: Option<u16>, error: Option<&str>) {
        let Some(mut span) = self.span.take() else {
            return;
        };
        span.set_attribute(KeyValue::new(fields::OUTCOME, outcome.to_owned()));
        if let Some(told) = self.told.get() {
            span.set_attribute(KeyValue::new(TOLD_MS, told));
        }
        if let Some(status) = status {
            span.set_attribute(KeyValue::new(fields::HTTP_STATUS, i64::from(status)));
        }
        if let Some(error) = error {
            span.set_status(Status::error(error.to_owned()));
        } else if outcome != "completed" {
            span.set_status(Status::error(outcome.to_owned()));
        }
        span.end();
    }
}

impl Drop for EgressSpan {
    fn drop(&mut self) {
        self.end("cancelled", None, None);
    }
}

/// An ingress span while its request runs: kept in the extensions of the `tracing` span made
/// by [`Spans::ingress`].
struct IngressRecord {
    span: SdkSpan,
    handle: IngressSpan,
    /// The hop span's fields, as last recorded.
    hop: Vec<(&'static str, Value)>,
    route: Option<String>,
    outcome: Option<String>,
    has_status: bool,
}

impl IngressRecord {
    fn end(mut self) {
        let told = self.handle.0.told.get();
        let IngressRecord {
            ref mut span,
            ref mut hop,
            ..
        } = self;
        for (name, value) in hop.drain(..) {
            span.set_attribute(KeyValue::new(name, value));
        }
        if let Some(told) = told {
            span.set_attribute(KeyValue::new(TOLD_MS, told));
        }
        // An early answer's hop records no status: the one that left is the caller's.
        let shared = &self.handle.0;
        if !self.has_status {
            let grpc = shared.answered_grpc.load(Ordering::Relaxed);
            let http = shared.answered.load(Ordering::Relaxed);
            if grpc != NO_STATUS {
                self.span
                    .set_attribute(KeyValue::new(fields::GRPC_STATUS, i64::from(grpc)));
            } else if http != NO_STATUS {
                self.span
                    .set_attribute(KeyValue::new(fields::HTTP_STATUS, i64::from(http)));
            }
        }
        if let Some(route) = self.route.take() {
            self.span.update_name(route);
        }
        match self.outcome.as_deref() {
            Some("completed") | None => {}
            Some(outcome) => self.span.set_status(Status::error(outcome.to_owned())),
        }
        self.span.end();
    }

    fn set(&mut self, name: &'static str, value: Value) {
        self.has_status |= name == fields::HTTP_STATUS || name == fields::GRPC_STATUS;
        match self.hop.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => self.hop.push((name, value)),
        }
    }
}

/// Copies the hop span's fields onto the ingress span of the request it opened under, and ends
/// that span when the request's `tracing` span closes (after its hop: a child keeps its parent
/// open). Installed only with `--otlp-endpoint`.
#[derive(Debug)]
pub(crate) struct HopSpans;

impl<S> Layer<S> for HopSpans
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: LayerContext<'_, S>) {
        if attrs.metadata().target() == HOP_TARGET {
            with_record(id, &ctx, |record| attrs.record(&mut HopFields(record)));
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: LayerContext<'_, S>) {
        with_record(id, &ctx, |record| values.record(&mut HopFields(record)));
    }

    fn on_close(&self, id: Id, ctx: LayerContext<'_, S>) {
        let Some(span) = ctx.span(&id) else {
            return;
        };
        if span.metadata().target() != INGRESS_TARGET {
            return;
        }
        let record = span.extensions_mut().remove::<IngressRecord>();
        if let Some(record) = record {
            record.end();
        }
    }
}

/// Run `f` on the ingress record of the request the hop span `id` opened under.
fn with_record<S>(id: &Id, ctx: &LayerContext<'_, S>, f: impl FnOnce(&mut IngressRecord))
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let Some(hop) = ctx.span(id) else {
        return;
    };
    if hop.metadata().target() != HOP_TARGET {
        return;
    }
    let Some(parent) = hop.parent() else {
        return;
    };
    if let Some(record) = parent.extensions_mut().get_mut::<IngressRecord>() {
        f(record);
    }
}

/// Reads a hop span's fields into its ingress record: the `deadline.*` ones and the answer's
/// status as attributes, the route as the span's name.
struct HopFields<'a>(&'a mut IngressRecord);

impl HopFields<'_> {
    fn keep(name: &str) -> bool {
        name.starts_with("deadline.")
            || name == fields::HTTP_STATUS
            || name == fields::GRPC_STATUS
            || name == fields::PROTOCOL
    }

    fn text(&mut self, field: &Field, value: String) {
        let name = field.name();
        if name == fields::ROUTE {
            self.0.route = Some(value);
            return;
        }
        if name == fields::OUTCOME {
            self.0.outcome = Some(value.clone());
        }
        if Self::keep(name) {
            self.0.set(name, Value::from(value));
        }
    }
}

impl Visit for HopFields<'_> {
    fn record_i64(&mut self, field: &Field, value: i64) {
        if Self::keep(field.name()) {
            self.0.set(field.name(), Value::I64(value));
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.record_i64(field, i64::try_from(value).unwrap_or(i64::MAX));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.text(field, value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        // `%` fields (the route, the service) arrive here; their Debug is their Display.
        self.text(field, format!("{value:?}"));
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanId, TraceFlags, TraceId, TraceState};

    fn handle(flags: TraceFlags) -> IngressSpan {
        IngressSpan(Arc::new(IngressShared {
            context: SpanContext::new(
                TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
                SpanId::from_hex("00f067aa0ba902b7").unwrap(),
                flags,
                false,
                TraceState::NONE,
            ),
            told: Arc::default(),
            answered: AtomicU16::new(NO_STATUS),
            answered_grpc: AtomicU16::new(NO_STATUS),
        }))
    }

    #[test]
    fn the_ingress_span_is_named_as_a_parent_only_when_it_is_exported() {
        let sampled = handle(TraceFlags::SAMPLED);
        assert_eq!(
            sampled.traceparent().unwrap(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        assert!(sampled.context().is_sampled());
        // Not sampled, not exported: the service keeps the caller's parent.
        assert_eq!(handle(TraceFlags::default()).traceparent(), None);
    }

    #[test]
    fn what_was_told_is_read_back_from_the_carrier_written_and_absent_without_one() {
        let told = Told::default();
        assert_eq!(told.get(), None);
        told.note(&HeaderMap::new(), Carrier::GrpcTimeout);
        assert_eq!(told.get(), None);
        let mut headers = HeaderMap::new();
        headers.insert("grpc-timeout", HeaderValue::from_static("294000u"));
        told.note(&headers, Carrier::GrpcTimeout);
        assert_eq!(told.get(), Some(294));
    }
}
