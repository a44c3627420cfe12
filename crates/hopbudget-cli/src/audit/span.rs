//! The audit's compact form of one span: ids as integers, names interned, and the
//! `deadline.*` attributes of a hop span (C14) decoded once, so that an open trace costs a
//! fixed hundred-odd bytes per span whatever the input spelled.

use foldhash::{HashMap, HashMapExt};

use super::status::StdOutcome;

/// Distinct names (services, span names, sources) kept; past it they count together.
pub(crate) const NAMES_CAP: usize = 10_000;

/// An interned name (service, span name, deadline source).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub(crate) struct Sym(pub(crate) u32);

/// Names seen in the input, each stored once. The table is capped so that input with
/// unbounded names (ids in span names) cannot grow memory without bound; past the cap every
/// new name becomes [`Interner::OVERFLOW`].
#[derive(Debug)]
pub(crate) struct Interner {
    ids: HashMap<Box<str>, Sym>,
    names: Vec<Box<str>>,
    cap: usize,
    /// Distinct names that did not fit.
    pub(crate) overflowed: u64,
    /// How often each name was interned: kept by a decoding thread's table for one batch
    /// ([`Interner::for_batch`]), so the auditing thread can count overflows as if it had
    /// interned every name itself.
    uses: Option<Vec<u64>>,
}

impl Interner {
    /// The name every name past the cap becomes.
    pub(crate) const OVERFLOW: Sym = Sym(0);
    const OVERFLOW_NAME: &'static str = "(too many distinct names)";

    pub(crate) fn new(cap: usize) -> Self {
        Self {
            ids: HashMap::new(),
            names: vec![Self::OVERFLOW_NAME.into()],
            cap: cap.max(1),
            overflowed: 0,
            uses: None,
        }
    }

    /// The names of one batch of lines, uncapped (a batch is bounded) and counting uses; the
    /// auditing thread maps them onto its own table with [`Interner::adopt`].
    pub(crate) fn for_batch() -> Self {
        Self {
            uses: Some(vec![0]),
            ..Self::new(usize::MAX)
        }
    }

    pub(crate) fn intern(&mut self, name: &str) -> Sym {
        let sym = self.intern_once(name);
        if let Some(uses) = &mut self.uses
            && let Some(n) = uses.get_mut(sym.0 as usize)
        {
            *n += 1;
        }
        sym
    }

    fn intern_once(&mut self, name: &str) -> Sym {
        if let Some(&s) = self.ids.get(name) {
            return s;
        }
        if self.names.len() > self.cap {
            self.overflowed += 1;
            return Self::OVERFLOW;
        }
        let sym = Sym(u32::try_from(self.names.len()).unwrap_or(u32::MAX));
        self.names.push(name.into());
        self.ids.insert(name.into(), sym);
        if let Some(uses) = &mut self.uses {
            uses.push(0);
        }
        sym
    }

    /// Intern, in order, the names a batch's table ([`Interner::for_batch`]) holds, as if
    /// each had been interned here as often as there; returns each batch symbol's symbol here.
    /// The names of a batch are in the order they were first seen in it, so a name new here
    /// gets the symbol it would have got had this table decoded the batch itself.
    pub(crate) fn adopt(&mut self, batch: Interner) -> Vec<Sym> {
        let uses = batch.uses.unwrap_or_default();
        let mut map = vec![Self::OVERFLOW];
        for (i, name) in batch.names.iter().enumerate().skip(1) {
            let sym = self.intern_once(name);
            if sym == Self::OVERFLOW {
                // `intern_once` counted one use.
                self.overflowed += uses.get(i).copied().unwrap_or(1).saturating_sub(1);
            }
            map.push(sym);
        }
        map
    }

    /// The symbol of `name` if it has been seen, without adding it.
    pub(crate) fn lookup(&self, name: &str) -> Option<Sym> {
        self.ids.get(name).copied()
    }

    /// Every name, by symbol number (the overflow name first).
    pub(crate) fn all(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(|n| &**n)
    }

    pub(crate) fn name(&self, sym: Sym) -> &str {
        self.names.get(sym.0 as usize).map_or("?", |n| n)
    }
}

/// A hop's terminal status as its span records it (`deadline.outcome`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Completed,
    Refused,
    Expired,
    Cancelled,
    /// No `deadline.outcome`, or a value this audit does not know.
    Unknown,
}

impl Outcome {
    pub(crate) fn parse(s: &str) -> Self {
        match s {
            "completed" => Outcome::Completed,
            "refused" => Outcome::Refused,
            "expired" => Outcome::Expired,
            "cancelled" => Outcome::Cancelled,
            _ => Outcome::Unknown,
        }
    }
}

/// The `deadline.*` attributes of a hop span. A span with a `deadline.source` or a
/// `deadline.outcome` is a hop; `deadline.remaining_ms` alone is not (the library's
/// `degrade` and `cache.read` spans inside a hop record it too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HopAttrs {
    /// `deadline.remaining_ms`: budget left on arrival.
    pub(crate) remaining_ms: Option<i64>,
    /// `deadline.source`: the carrier, `fallback`, `local`, `detached` (or the demo's `none`).
    pub(crate) source: Option<Sym>,
    /// `deadline.margin_ms`: what this hop keeps back before forwarding.
    pub(crate) margin_ms: Option<i64>,
    /// `deadline.outcome`.
    pub(crate) outcome: Outcome,
    /// `deadline.required_ms`, on a refusal.
    pub(crate) required_ms: Option<i64>,
    /// `deadline.overrun_ms`: work finished this long after the deadline.
    pub(crate) overrun_ms: Option<i64>,
    /// `deadline.told_ms`, on a sidecar's spans: what the service behind an ingress was told,
    /// or what the next hop of an egress call was told. `None` when nothing was stamped.
    pub(crate) told_ms: Option<i64>,
    /// `deadline.matched`, on a sidecar's egress span: `Some(false)` when the call matched no
    /// inbound request (the service does not carry trace context, C26).
    pub(crate) matched: Option<bool>,
}

/// What a span is to `hopbudget proxy` (`hopbudget.proxy`): an ingress hop, an egress call,
/// or not one of its spans.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Proxy {
    /// Not a sidecar's span (an application's, or a library hop span).
    #[default]
    None,
    /// The sidecar's span of one inbound request (kind SERVER).
    Ingress,
    /// The sidecar's span of one outbound call of its service (kind CLIENT).
    Egress,
}

impl Proxy {
    /// The attribute's value; anything else is not a sidecar span.
    pub(crate) fn parse(s: &str) -> Self {
        match s {
            "ingress" => Proxy::Ingress,
            "egress" => Proxy::Egress,
            _ => Proxy::None,
        }
    }
}

/// One span, as the audit keeps it while its trace is open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) trace: u128,
    pub(crate) id: u64,
    /// Zero when the span is a root.
    pub(crate) parent: u64,
    pub(crate) service: Sym,
    pub(crate) name: Sym,
    /// OTLP span kind: 0 unspecified, 1 internal, 2 server, 3 client, 4 producer, 5 consumer.
    pub(crate) kind: u8,
    pub(crate) start_ns: u64,
    pub(crate) end_ns: u64,
    pub(crate) hop: Option<HopAttrs>,
    /// How it ended by OpenTelemetry's standard status attributes ([`StdOutcome`]).
    pub(crate) std: StdOutcome,
    /// It carries a deadline header the instrumentation captured
    /// ([`deadline_header`]).
    pub(crate) deadline_header: bool,
    /// The budget (ms) a relative deadline header on it states ([`header_budget_ms`]): what
    /// a server span received, what a client span sent.
    pub(crate) header_ms: Option<u32>,
    /// An `exception.type` naming a timeout was recorded on it: this side's own timeout
    /// fired (it gave up), as opposed to being answered 504 or DEADLINE_EXCEEDED.
    pub(crate) own_timeout: bool,
    /// A sidecar's ingress or egress span (`hopbudget.proxy`).
    pub(crate) proxy: Proxy,
    /// `server.address`: where a client span called (an egress call's destination).
    pub(crate) peer: Option<Sym>,
}

impl Span {
    /// A sidecar's egress span: the call's record, not a hop of its own.
    pub(crate) fn is_egress(&self) -> bool {
        self.proxy == Proxy::Egress
    }

    /// Whether this span records again what its parent (`parent`, if in the trace) already
    /// records: one request or one call seen twice, by a sidecar and by the service's own
    /// instrumentation (a SERVER span of a service directly under another of the same
    /// service, as under its sidecar's ingress span; a CLIENT span directly under a CLIENT
    /// span of the same service, as an egress span under the client span it carried).
    /// Counting both would double the service's requests, calls and depth.
    pub(crate) fn repeats(&self, parent: Option<&Span>) -> bool {
        parent.is_some_and(|p| {
            p.service == self.service
                && p.kind == self.kind
                && (self.kind == 2 || self.kind == 3)
                && self.parent != 0
        })
    }

    /// The hop attributes of a hop span; an egress span is the caller's call, not a hop.
    pub(crate) fn hop_attrs(&self) -> Option<HopAttrs> {
        self.hop.filter(|_| !self.is_egress())
    }

    /// How long the span lasted, in whole milliseconds (zero if its end precedes its start).
    pub(crate) fn duration_ms(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns) / 1_000_000
    }
}

/// Parse a hex id of exactly `2 * bytes` digits (OTLP JSON spells ids in hex).
pub(crate) fn parse_hex_id(s: &str, bytes: usize) -> Result<u128, String> {
    if s.len() != bytes * 2 {
        return Err(format!(
            "expected {} hex digits, got {} characters",
            bytes * 2,
            s.len()
        ));
    }
    // One pass, a nibble per byte: `from_str_radix` after a validity scan cost about 850
    // instructions for a span's three ids.
    let mut v = 0u128;
    for b in s.bytes() {
        let nibble = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return Err(format!("not hexadecimal: {s:?}")),
        };
        v = (v << 4) | u128::from(nibble);
    }
    Ok(v)
}

/// The deadline header a span attribute holds, as OpenTelemetry instrumentation captures it
/// (`http.request.header.<name>`, `-` spelled `_` by some SDKs, or gRPC request metadata):
/// `x-request-timeout-ms`, `grpc-timeout`, `x-request-deadline`, `connect-timeout-ms`, Envoy's
/// `x-envoy-expected-rq-timeout-ms` and `x-envoy-upstream-rq-timeout-ms`. Returns the
/// canonical name.
pub(crate) fn deadline_header(key: &str) -> Option<&'static str> {
    let name = key
        .strip_prefix("http.request.header.")
        .or_else(|| key.strip_prefix("rpc.grpc.request.metadata."))?;
    const NAMES: [&str; 6] = [
        "x-request-timeout-ms",
        "grpc-timeout",
        "x-request-deadline",
        "connect-timeout-ms",
        "x-envoy-expected-rq-timeout-ms",
        "x-envoy-upstream-rq-timeout-ms",
    ];
    NAMES.into_iter().find(|n| {
        n.len() == name.len()
            && n.bytes()
                .zip(name.bytes())
                .all(|(a, b)| a == b.to_ascii_lowercase() || (a == b'-' && b == b'_'))
    })
}

/// The budget a relative deadline header states, in ms: a number of milliseconds, or
/// gRPC's `grpc-timeout` (digits and a unit `H M S m u n`). `x-request-deadline` is an
/// instant, not a budget: `None`.
pub(crate) fn header_budget_ms(name: &str, value: &str) -> Option<u32> {
    let v = value.trim();
    if name == "x-request-deadline" {
        return None;
    }
    if name == "grpc-timeout" {
        let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
        let n: u64 = digits.parse().ok()?;
        let ms = match unit {
            "H" => n.checked_mul(3_600_000)?,
            "M" => n.checked_mul(60_000)?,
            "S" => n.checked_mul(1_000)?,
            "m" => n,
            "u" => n / 1_000,
            "n" => n / 1_000_000,
            _ => return None,
        };
        return u32::try_from(ms).ok();
    }
    v.parse::<f64>()
        .ok()
        .filter(|f| f.is_finite() && *f >= 0.0 && *f < f64::from(u32::MAX))
        .map(|f| f as u32)
}

/// Decode base64 (standard or URL-safe alphabet, padding optional) of exactly `bytes`
/// bytes: the spelling of ids in the generic protobuf JSON mapping, which a naive converter
/// writes instead of OTLP JSON's hex.
pub(crate) fn parse_base64_id(s: &str, bytes: usize) -> Option<u128> {
    let digits = s.trim_end_matches('=');
    let mut bits = 0u32;
    let mut acc = 0u32;
    let mut out = Vec::with_capacity(bytes);
    for c in digits.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    (out.len() == bytes && acc == 0)
        .then(|| out.iter().fold(0u128, |a, &b| (a << 8) | u128::from(b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interner_caps_distinct_names() {
        let mut i = Interner::new(2);
        let a = i.intern("a");
        assert_eq!(i.intern("a"), a);
        let b = i.intern("b");
        assert_ne!(a, b);
        assert_eq!(i.intern("c"), Interner::OVERFLOW);
        assert_eq!(i.overflowed, 1);
        assert_eq!(i.name(b), "b");
    }

    #[test]
    fn base64_ids_and_deadline_headers() {
        assert_eq!(parse_base64_id("AAAAAAAAAP8=", 8), Some(255));
        assert_eq!(
            parse_base64_id("AQIDBAUGBwgJCgsMDQ4PEA==", 16),
            Some(0x0102030405060708090a0b0c0d0e0f10)
        );
        assert_eq!(parse_base64_id("AAAAAAAAAP8=", 16), None);
        assert_eq!(parse_base64_id("00000000000000ff", 8), None);
        assert_eq!(
            deadline_header("http.request.header.x_request_timeout_ms"),
            Some("x-request-timeout-ms")
        );
        assert!(deadline_header("http.request.header.grpc-timeout").is_some());
        assert!(deadline_header("rpc.grpc.request.metadata.grpc-timeout").is_some());
        assert!(deadline_header("http.request.header.user_agent").is_none());
        assert_eq!(header_budget_ms("grpc-timeout", "750m"), Some(750));
        assert_eq!(header_budget_ms("grpc-timeout", "2S"), Some(2_000));
        assert_eq!(header_budget_ms("x-request-timeout-ms", "800"), Some(800));
        assert_eq!(
            header_budget_ms("x-request-deadline", "1700000000000"),
            None
        );
    }

    #[test]
    fn hex_ids() {
        assert_eq!(parse_hex_id("00000000000000ff", 8), Ok(255));
        assert!(parse_hex_id("ff", 8).is_err());
        assert!(parse_hex_id("zz00000000000000", 8).is_err());
        assert!(parse_hex_id("+0000000000000ff", 8).is_err());
    }
}
