//! What `hopbudget proxy` is told on its command line: where to listen, the service behind it,
//! the profile, and how the service's own stack wants its deadline spelled.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use hopbudget::codec::Carrier;
use http::uri::Authority;

/// The options of `hopbudget proxy`; what it reads and writes is in [`HELP`].
#[derive(Debug, Clone, Args)]
pub struct ProxyArgs {
    /// Address callers connect to: HTTP/1.1 and HTTP/2 without TLS (h2c, so gRPC too).
    /// Port 0 picks a free port; the address is printed on stdout.
    #[arg(long, value_name = "ADDR")]
    pub listen: SocketAddr,

    /// The service behind the proxy: HOST:PORT or http://HOST:PORT; https://HOST:PORT speaks
    /// TLS to it, as `--upstream-tls` does.
    #[arg(long, value_name = "ADDR", value_parser = parse_upstream)]
    pub upstream: Target,

    /// Speak TLS to the service (rustls), its certificate verified against `--upstream-ca`,
    /// else the system's roots, for the host `--upstream` names (a DNS name or an IP address).
    #[arg(long)]
    pub upstream_tls: bool,

    /// The CA certificates (PEM) the service's certificate is verified against, with
    /// `--upstream-tls` or an https:// `--upstream`.
    #[arg(long, value_name = "FILE")]
    pub upstream_ca: Option<PathBuf>,

    /// The CA certificates (PEM) an https:// `--egress-to` destination's certificate is
    /// verified against; the system's roots without it.
    #[arg(long, value_name = "FILE")]
    pub egress_ca: Option<PathBuf>,

    /// The adoption profile (YAML, as for the library's layers): carriers read, `max_ms`,
    /// `edge_total_ms`, margins, route minimums, status codes. Built-in defaults without it.
    /// Reloaded on SIGHUP and when its content changes (`--profile-poll`); a new profile that
    /// does not validate is refused, logged, and the one in force stays.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,

    /// The service's protobuf descriptor set (a FileDescriptorSet, as `protoc
    /// --descriptor_set_out` or tonic-build's `file_descriptor_set_path` writes for
    /// reflection): each gRPC method it names has its own route label from its first call,
    /// whatever its outcome. Without it a method is `other` until the service has answered it
    /// once; made-up methods are `other` either way. Repeatable; read once, at start.
    #[arg(long = "descriptor-set", value_name = "FILE")]
    pub descriptor_set: Vec<PathBuf>,

    /// The carrier the service's stack reads. `auto`: `grpc-timeout` for gRPC requests (grpc-go,
    /// grpc-java, grpcio put it in the handler's context), `x-request-timeout-ms` for the rest.
    #[arg(long, value_enum, value_name = "CARRIER", default_value_t = UpstreamCarrier::Auto)]
    pub upstream_carrier: UpstreamCarrier,

    /// How to reach the service. `auto`: gRPC requests over h2c, the rest over HTTP/1.1.
    #[arg(long, value_enum, value_name = "PROTOCOL", default_value_t = UpstreamProtocol::Auto)]
    pub upstream_protocol: UpstreamProtocol,

    /// Serve `GET /metrics` (Prometheus text) and `GET /healthz` on this address.
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<SocketAddr>,

    /// Egress: an HTTP proxy for the service's outbound HTTP/1.1 calls (point its
    /// `HTTP_PROXY` here). Each call gets the remaining budget of the inbound request it
    /// belongs to, found by the `traceparent` (or `--request-id-header`) it carries.
    #[arg(long, value_name = "ADDR")]
    pub egress: Option<SocketAddr>,

    /// With `--egress`: the only destinations it calls, `HOST`, `HOST:PORT` or `*.DOMAIN`;
    /// anything else is refused with 403. Repeatable. Without it, any destination.
    #[arg(long = "egress-allow", value_name = "HOST[:PORT]", requires = "egress")]
    pub egress_allow: Vec<EgressAllow>,

    /// Egress to one destination: the service dials LISTEN for HOST:PORT (h2c and gRPC, or
    /// HTTP/1.1). Repeatable.
    #[arg(long = "egress-to", value_name = "LISTEN=HOST:PORT", value_parser = parse_egress_to)]
    pub egress_to: Vec<(SocketAddr, Target)>,

    /// A request-id header the service forwards on its outbound calls, to find the inbound
    /// request a call belongs to (besides `traceparent`).
    #[arg(long, value_name = "NAME")]
    pub request_id_header: Option<http::HeaderName>,

    /// Worker threads. One (a current-thread runtime) keeps the CPU per request lowest: no
    /// hand-offs between threads, as nginx with one worker process; raise it for a service
    /// that needs more than a core of proxying.
    #[arg(long, value_name = "N", default_value = "1")]
    pub threads: std::num::NonZeroUsize,

    /// Do not log a line per hop (the proxy turns the profile's `log.hops` on otherwise).
    #[arg(long)]
    pub no_hop_log: bool,

    /// How the lines on stderr are written: `text` (`name=value` after the message) or
    /// `json` (one object a line, the fields at its top level beside `timestamp`, `level`,
    /// `target` and `message`), for a log pipeline to read. The `hop ended` line has the same
    /// fields in both.
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Export a span per request and per egress call to this OTLP/HTTP endpoint (protobuf),
    /// e.g. http://127.0.0.1:4318/v1/traces; a URL without a path gets `/v1/traces`. Plain
    /// HTTP only: run a local Collector to reach a TLS endpoint. Without it no span is made.
    #[arg(long, value_name = "URL", value_parser = parse_otlp_endpoint)]
    pub otlp_endpoint: Option<http::Uri>,

    /// Close an HTTP/1.1 connection whose request head is not complete this long after its
    /// first byte (slowloris). nginx's `client_header_timeout`. Seconds, fractions allowed.
    #[arg(long, value_name = "SECONDS", default_value = "10", value_parser = parse_seconds)]
    pub header_read_timeout: Duration,

    /// Close a connection with no request in flight that has read and written nothing for
    /// this long. nginx's `keepalive_timeout`, Envoy's `idle_timeout`. Seconds.
    #[arg(long, value_name = "SECONDS", default_value = "60", value_parser = parse_seconds)]
    pub idle_timeout: Duration,

    /// End a request whose caller has sent no body byte for this long while the proxy waits
    /// for its body (408, the connection closed), however much budget it has left. nginx's
    /// `client_body_timeout`. Seconds, fractions allowed.
    #[arg(long, value_name = "SECONDS", default_value = "30", value_parser = parse_seconds)]
    pub body_read_timeout: Duration,

    /// Open caller connections at most, on all listeners together; at the limit the proxy
    /// stops accepting (callers wait in the kernel's backlog) and serves those it has.
    /// Default: 90% of the open-file limit (`ulimit -n`), halved, as each caller connection
    /// may hold one to the service. nginx's `worker_connections`.
    #[arg(long, value_name = "N")]
    pub max_connections: Option<std::num::NonZeroUsize>,

    /// Pooled HTTP/1.1 connections to the service open at once, at most: those HTTP/2
    /// callers' streams take (an HTTP/1.1 caller has its own one). A request past it waits
    /// for one to end, inside its budget. Default: the `--max-connections` value. Envoy's
    /// cluster `max_connections` circuit breaker (1024), nginx's upstream `max_conns`.
    #[arg(long, value_name = "N")]
    pub upstream_max_connections: Option<std::num::NonZeroUsize>,

    /// Close a pooled connection to the service (or to an egress destination) idle this long.
    /// At most 32 idle ones are kept per destination. nginx's upstream `keepalive_timeout`.
    /// Seconds.
    #[arg(long, value_name = "SECONDS", default_value = "90", value_parser = parse_seconds)]
    pub upstream_idle_timeout: Duration,

    /// How often the profile file's content is checked for a change, which is then put in
    /// force as on SIGHUP (a ConfigMap's symlink swap included). Seconds.
    #[arg(long, value_name = "SECONDS", default_value = "5", value_parser = parse_seconds)]
    pub profile_poll: Duration,

    /// TLS on `--listen`: the certificate chain (PEM, leaf first). With `--tls-key`; ALPN
    /// offers h2 and http/1.1.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The private key for `--tls-cert` (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// How long a WebSocket connection lives after its handshake (which its budget bounds,
    /// as any request's) before the proxy closes it. Envoy's `max_stream_duration`. Seconds.
    #[arg(long, value_name = "SECONDS", default_value = "3600", value_parser = parse_seconds)]
    pub tunnel_max: Duration,

    /// Concurrent HTTP/2 streams per caller connection, at most (advertised in SETTINGS).
    /// nginx's `http2_max_concurrent_streams`.
    #[arg(long, value_name = "N", default_value = "128")]
    pub max_streams: u32,
}

/// A positive number of seconds, fractions allowed (`0.5`).
fn parse_seconds(text: &str) -> Result<Duration, String> {
    let secs: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number of seconds"))?;
    if !(secs > 0.0 && secs <= 86_400.0) {
        return Err(format!(
            "`{text}`: give more than 0 and at most 86400 seconds"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// What `hopbudget proxy --help` says the proxy reads and writes.
pub const HELP: &str = "\
Run a sidecar that keeps the deadline contract (rule C25) for a service in any language.

Reads, per request: the deadline headers the profile enables (grpc-timeout,
x-request-timeout-ms, x-request-deadline, connect-timeout-ms, x-envoy-expected-rq-timeout-ms;
the tightest wins, capped at the profile's max_ms; none: the profile's edge_total_ms).

Answers itself, without calling the service: a malformed deadline header (400 naming the
header; gRPC INVALID_ARGUMENT), a budget already spent (504; DEADLINE_EXCEEDED), a budget
below the route's min_budget_ms (503 with x-deadline-required-ms; the profile's gRPC status).

Writes to the service: the request with every inbound deadline header removed and the
remaining budget minus the hop margin in one carrier (--upstream-carrier). At the deadline it
answers 504 / DEADLINE_EXCEEDED and ends the service's request (HTTP/2 stream reset, HTTP/1.1
connection closed) so the service's framework cancels its handler; a caller that leaves
first ends it the same way, recorded as cancelled.

Egress (--egress, --egress-to): the service's outbound calls through the proxy get the
remaining budget of the inbound request they belong to, found by their traceparent (or
--request-id-header), minus the margin; refused below refuse_below_ms; no deadline header to
a host outbound.trusted_hosts does not trust; no match: the edge total, counted as missing.

Writes for the operator: `listening on ADDR` (and `admin on ADDR`, `egress on ADDR`) on stdout once
ready; one
`hop ended` line per request on stderr (--log-format json: one JSON object a line, the same
fields); Prometheus metrics (hopbudget_hops_total by outcome,
...) on --admin at /metrics; with --otlp-endpoint, an OpenTelemetry span per request and
per egress call in the request's trace (deadline.* attributes, deadline.told_ms: what the
service or the destination was told). SIGTERM or Ctrl-C: stops accepting, lets requests in flight
finish within their budgets, exits 0 (1 if some were still running after max_ms + 1 s).";

/// The carrier the budget is restated in for the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum UpstreamCarrier {
    /// `grpc-timeout` for gRPC requests, `x-request-timeout-ms` for the others.
    Auto,
    /// `grpc-timeout: 294m`.
    #[value(name = "grpc-timeout")]
    GrpcTimeout,
    /// `x-request-timeout-ms: 294`.
    #[value(name = "x-request-timeout-ms")]
    RequestTimeoutMs,
    /// `x-request-deadline`: Unix epoch milliseconds (the service's clock must be trusted).
    Epoch,
    /// `x-envoy-expected-rq-timeout-ms: 294`, for a stack that reads Envoy's header.
    Envoy,
}

impl UpstreamCarrier {
    /// The carrier for one request.
    pub fn for_request(self, grpc: bool) -> Carrier {
        match self {
            UpstreamCarrier::Auto if grpc => Carrier::GrpcTimeout,
            UpstreamCarrier::Auto | UpstreamCarrier::RequestTimeoutMs => Carrier::RelativeMs,
            UpstreamCarrier::GrpcTimeout => Carrier::GrpcTimeout,
            UpstreamCarrier::Epoch => Carrier::EpochMs,
            UpstreamCarrier::Envoy => Carrier::Envoy,
        }
    }
}

/// How the proxy's log lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// `2026-03-01T12:00:00.000000Z  INFO hopbudget::hop: hop ended service="orders" ...`
    Text,
    /// `{"timestamp":"...","level":"INFO","message":"hop ended","service":"orders",...}`
    Json,
}

/// The protocol spoken to the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum UpstreamProtocol {
    /// gRPC requests over h2c, the rest over HTTP/1.1.
    Auto,
    /// HTTP/1.1 for everything.
    Http1,
    /// HTTP/2 with prior knowledge (no TLS) for everything.
    H2c,
}

impl UpstreamProtocol {
    /// Whether one request goes over HTTP/2.
    pub fn http2(self, grpc: bool) -> bool {
        match self {
            UpstreamProtocol::Auto => grpc,
            UpstreamProtocol::Http1 => false,
            UpstreamProtocol::H2c => true,
        }
    }
}

/// `http://HOST[:PORT][/PATH]`: where OTLP/HTTP spans go. No path is the Collector's
/// `/v1/traces`, as OpenTelemetry's `OTEL_EXPORTER_OTLP_ENDPOINT` takes it.
fn parse_otlp_endpoint(text: &str) -> Result<http::Uri, String> {
    let uri: http::Uri = text
        .parse()
        .map_err(|e| format!("`{text}` is not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(scheme) => {
            return Err(format!(
                "`{scheme}://` is not supported; spans are sent over plain HTTP \
                 (run a local Collector to forward them over TLS)"
            ));
        }
        None => {
            return Err(format!(
                "`{text}` names no scheme; give http://HOST:PORT/v1/traces"
            ));
        }
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("`{text}` names no host"));
    }
    if uri.path().is_empty() || uri.path() == "/" {
        let authority = uri.authority().map_or("", |a| a.as_str());
        return format!("http://{authority}/v1/traces")
            .parse()
            .map_err(|e| format!("`{text}`: {e}"));
    }
    Ok(uri)
}

/// `LISTEN=HOST:PORT`.
fn parse_egress_to(text: &str) -> Result<(SocketAddr, Target), String> {
    let (listen, to) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not LISTEN=HOST:PORT"))?;
    let listen = listen
        .parse()
        .map_err(|e| format!("`{listen}` is not an address to listen on: {e}"))?;
    Ok((listen, parse_upstream(to)?))
}

/// Where the proxy sends requests: an address, and whether over TLS.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    /// `HOST:PORT`.
    pub authority: Authority,
    /// Given as `https://HOST:PORT`.
    pub tls: bool,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.tls {
            write!(f, "https://{}", self.authority)
        } else {
            write!(f, "{}", self.authority)
        }
    }
}

/// `HOST:PORT`, `http://HOST:PORT` or `https://HOST:PORT`; a path or another scheme is a
/// mistake worth naming.
fn parse_upstream(text: &str) -> Result<Target, String> {
    let (rest, tls) = match text.split_once("://") {
        Some(("http", rest)) => (rest, false),
        Some(("https", rest)) => (rest, true),
        Some((scheme, _)) => {
            return Err(format!(
                "`{scheme}://` is not supported: give HOST:PORT, http://HOST:PORT or https://HOST:PORT"
            ));
        }
        None => (text, false),
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains('/') {
        return Err(format!(
            "`{text}` has a path; give only HOST:PORT (requests keep their own paths)"
        ));
    }
    let authority: Authority = rest
        .parse()
        .map_err(|e| format!("`{text}` is not HOST:PORT: {e}"))?;
    if authority.port_u16().is_none() {
        return Err(format!("`{text}` names no port; give HOST:PORT"));
    }
    Ok(Target { authority, tls })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_addresses_are_host_and_port_or_say_what_is_wrong() {
        let ok = |t: &str| parse_upstream(t).unwrap().to_string();
        assert_eq!(ok("127.0.0.1:8080"), "127.0.0.1:8080");
        assert_eq!(ok("http://svc:9/"), "svc:9");
        assert_eq!(ok("https://svc:9"), "https://svc:9");
        assert!(parse_upstream("ftp://svc:9").unwrap_err().contains("ftp"));
        assert!(parse_upstream("svc:9/api").unwrap_err().contains("path"));
        assert!(parse_upstream("svc").unwrap_err().contains("port"));
        let (listen, to) = parse_egress_to("127.0.0.1:7001=pricing:50051").unwrap();
        assert_eq!(
            (listen.port(), to.to_string()),
            (7001, "pricing:50051".into())
        );
        let (_, to) = parse_egress_to("127.0.0.1:7002=https://api.example:443").unwrap();
        assert!(to.tls && to.authority.as_str() == "api.example:443");
        assert!(
            parse_egress_to("pricing:50051")
                .unwrap_err()
                .contains("LISTEN=")
        );
    }

    #[test]
    fn otlp_endpoints_are_plain_http_urls_or_say_what_is_wrong() {
        let ok = |t: &str| parse_otlp_endpoint(t).unwrap().to_string();
        assert_eq!(
            ok("http://127.0.0.1:4318/v1/traces"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            ok("http://collector:4318"),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            ok("http://collector:4318/"),
            "http://collector:4318/v1/traces"
        );
        assert!(
            parse_otlp_endpoint("https://c:4318")
                .unwrap_err()
                .contains("https")
        );
        assert!(
            parse_otlp_endpoint("127.0.0.1:4318")
                .unwrap_err()
                .contains("scheme")
        );
        assert!(
            parse_otlp_endpoint("not a url")
                .unwrap_err()
                .contains("URL")
        );
    }

    #[test]
    fn auto_picks_grpc_timeout_and_h2c_for_grpc_only() {
        assert_eq!(
            UpstreamCarrier::Auto.for_request(true),
            Carrier::GrpcTimeout
        );
        assert_eq!(
            UpstreamCarrier::Auto.for_request(false),
            Carrier::RelativeMs
        );
        assert_eq!(UpstreamCarrier::Envoy.for_request(true), Carrier::Envoy);
        assert!(UpstreamProtocol::Auto.http2(true) && !UpstreamProtocol::Auto.http2(false));
        assert!(UpstreamProtocol::H2c.http2(false) && !UpstreamProtocol::Http1.http2(true));
    }
}

/// A destination `--egress` may call (`--egress-allow`): `HOST`, `HOST:PORT`, or `*.DOMAIN`
/// (any port).
///
/// ```
/// let allow: hopbudget_cli::proxy::options::EgressAllow = "*.svc.local".parse().unwrap();
/// assert!("stock:port".parse::<hopbudget_cli::proxy::options::EgressAllow>().is_err());
/// # let _ = allow;
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct EgressAllow {
    host: String,
    port: Option<u16>,
}

impl std::str::FromStr for EgressAllow {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let (host, port) = match text.rsplit_once(':') {
            Some((host, port)) if !host.ends_with(']') || text.starts_with('[') => {
                let port = port
                    .parse()
                    .map_err(|_| format!("`{text}`: the port `{port}` is not a number"))?;
                (host, Some(port))
            }
            _ => (text, None),
        };
        if host.is_empty() || host.contains('/') {
            return Err(format!("`{text}` is not HOST, HOST:PORT or *.DOMAIN"));
        }
        Ok(Self {
            host: host.to_ascii_lowercase(),
            port,
        })
    }
}

impl EgressAllow {
    pub(crate) fn admits(&self, authority: &http::uri::Authority) -> bool {
        let host = authority.host().to_ascii_lowercase();
        let host_ok = match self.host.strip_prefix("*.") {
            Some(domain) => host.strip_suffix(domain).is_some_and(|h| h.ends_with('.')),
            None => host == self.host,
        };
        host_ok && self.port.is_none_or(|p| authority.port_u16() == Some(p))
    }
}
