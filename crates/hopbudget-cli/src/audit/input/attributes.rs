//! What the audit reads from one span's status, events and attributes, whatever the wire
//! format: the hop's `deadline.*` fields, the standard status signals, `service.name` and the
//! captured deadline headers. The JSON and the protobuf decoders each read their own shapes
//! and hand every attribute here through [`AttrValue`], so what counts is written once.

use hopbudget::observe::fields;

use crate::audit::span::{
    HopAttrs, Interner, Outcome, Proxy, Span, Sym, deadline_header, header_budget_ms,
};
use crate::audit::status::{self, Signals};

/// An attribute's value as a decoder holds it.
pub(super) trait AttrValue {
    /// Its string, if it is one.
    fn as_str(&self) -> Option<&str>;
    /// Its integer (an integer, a finite double rounded, or a string of digits).
    fn as_i64(&self) -> Option<i64>;
    /// Its string, or an array's first string (a captured header is an array).
    fn first_str(&self) -> Option<&str>;
    /// Its boolean (a bool, or the string `true` / `false`).
    fn as_bool(&self) -> Option<bool>;
}

/// `hopbudget.proxy`: `ingress` or `egress` on the spans `hopbudget proxy` emits.
pub(crate) const PROXY: &str = "hopbudget.proxy";
/// `deadline.told_ms`: what a sidecar told the service behind it, or the next hop.
pub(crate) const TOLD_MS: &str = "deadline.told_ms";
/// `deadline.matched`: whether an egress call matched an inbound request.
pub(crate) const MATCHED: &str = "deadline.matched";
/// `server.address`: the destination of a client span.
pub(crate) const SERVER_ADDRESS: &str = "server.address";

/// One span's readings, filled attribute by attribute (`'a`: the decoded request, which
/// outlives the reading).
pub(super) struct SpanReading<'a> {
    service: Option<Sym>,
    hop: HopAttrs,
    is_hop: bool,
    signals: Signals,
    has_header: bool,
    header_ms: Option<u32>,
    proxy: Proxy,
    /// `server.address`, interned only on an egress span (a client span's destination is
    /// otherwise unused, and hosts are many).
    peer: Option<&'a str>,
}

/// What a decoder reads from the span itself: its ids, name, kind and times.
pub(super) struct SpanHead {
    pub(super) trace: u128,
    pub(super) id: u64,
    pub(super) parent: u64,
    pub(super) name: Sym,
    pub(super) kind: u8,
    pub(super) start_ns: u64,
    pub(super) end_ns: u64,
}

impl<'a> SpanReading<'a> {
    /// A span of `service` (its resource's `service.name`, if any), nothing read yet.
    pub(super) fn new(service: Option<Sym>) -> Self {
        Self {
            service,
            hop: HopAttrs {
                remaining_ms: None,
                source: None,
                margin_ms: None,
                outcome: Outcome::Unknown,
                required_ms: None,
                overrun_ms: None,
                told_ms: None,
                matched: None,
            },
            is_hop: false,
            signals: Signals::default(),
            has_header: false,
            header_ms: None,
            proxy: Proxy::None,
            peer: None,
        }
    }

    /// The span status code (0 unset, 1 ok, 2 error).
    pub(super) fn status_code(&mut self, code: i64) {
        self.signals.span_status(code);
    }

    /// An `exception` event's `exception.type`.
    pub(super) fn exception_type(&mut self, t: &str) {
        self.signals.exception(t);
    }

    /// One span attribute.
    pub(super) fn attribute<V: AttrValue + ?Sized>(
        &mut self,
        key: &str,
        value: Option<&'a V>,
        names: &mut Interner,
    ) {
        if let Some(name) = deadline_header(key) {
            self.has_header = true;
            self.header_ms = self
                .header_ms
                .or_else(|| value?.first_str().and_then(|v| header_budget_ms(name, v)));
            return;
        }
        let Some(v) = value else { return };
        let hop = &mut self.hop;
        match key {
            key @ (status::GRPC_STATUS
            | status::HTTP_STATUS
            | status::HTTP_STATUS_OLD
            | status::EXCEPTION_TYPE) => self.signals.attribute(key, v.as_i64(), v.as_str()),
            fields::SERVICE => {
                if let Some(s) = v.as_str() {
                    self.service = Some(names.intern(s));
                }
            }
            // Not a hop by itself: a `degrade` or `cache.read` span inside a hop has it too.
            fields::REMAINING_MS => hop.remaining_ms = v.as_i64(),
            fields::SOURCE => {
                self.is_hop = true;
                hop.source = v.as_str().map(|s| names.intern(s));
            }
            fields::MARGIN_MS => hop.margin_ms = v.as_i64(),
            fields::OUTCOME => {
                self.is_hop = true;
                hop.outcome = v.as_str().map_or(Outcome::Unknown, Outcome::parse);
            }
            fields::REQUIRED_MS => hop.required_ms = v.as_i64(),
            fields::OVERRUN_MS => hop.overrun_ms = v.as_i64(),
            TOLD_MS => hop.told_ms = v.as_i64(),
            MATCHED => hop.matched = v.as_bool(),
            PROXY => self.proxy = v.as_str().map_or(Proxy::None, Proxy::parse),
            SERVER_ADDRESS => self.peer = v.as_str(),
            _ => {}
        }
    }

    /// The span, with what was read.
    pub(super) fn finish(self, head: SpanHead, names: &mut Interner) -> Span {
        Span {
            trace: head.trace,
            id: head.id,
            parent: head.parent,
            service: self
                .service
                .unwrap_or_else(|| names.intern("(unknown service)")),
            name: head.name,
            kind: head.kind,
            start_ns: head.start_ns,
            end_ns: head.end_ns,
            hop: self.is_hop.then_some(self.hop),
            std: self.signals.outcome(),
            deadline_header: self.has_header,
            header_ms: self.header_ms,
            own_timeout: self.signals.own_timeout(),
            proxy: self.proxy,
            peer: self
                .peer
                .filter(|_| self.proxy == Proxy::Egress)
                .map(|p| names.intern(p)),
        }
    }
}
