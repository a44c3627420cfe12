//! `hopbudget proxy`: a sidecar that keeps the deadline contract for a service written in any
//! language (rule C25, issue #37).
//!
//! It composes the library's own layers: [`ServerBudgetLayer`](hopbudget::http::server::ServerBudgetLayer)
//! (or the gRPC server layer for gRPC calls) in front, [`ClientBudgetLayer`](hopbudget::http::client::ClientBudgetLayer)
//! behind, over hyper-util's client to the service. So the proxy reads, refuses, restates and
//! records exactly as a Rust service on the layers does:
//!
//! - the inbound carriers, the tightest wins, clamped to the profile's maximum (C9); a
//!   malformed header is a 400 naming it (INVALID_ARGUMENT for gRPC), a spent budget a 504
//!   (DEADLINE_EXCEEDED), a budget below the route's minimum a 503 with the required and
//!   remaining budgets, all without touching the service (C3); over HTTP/1.1 these answers
//!   reach a client still writing its body (C18);
//! - the request goes on with every inbound deadline header removed and the forward budget
//!   (remaining minus margin, C2) restated in the carrier the service's stack reads
//!   ([`options::UpstreamCarrier`]);
//! - at the deadline the caller gets 504 / DEADLINE_EXCEEDED and the call to the service is
//!   dropped, which resets its HTTP/2 stream or closes its HTTP/1.1 connection, so Go's
//!   `r.Context()` or a gRPC server's context is cancelled (C4, C7); a caller that leaves
//!   first is the same, recorded `cancelled` (C5);
//! - every request admitted ends with one outcome: `hopbudget_hops_total{outcome}` on the
//!   admin port's `/metrics`, and one `hop ended` line on stderr (C14, C17).
//!
//! - the service's outbound calls through the proxy (`--egress`, `--egress-to`) get the
//!   remaining budget of the request they belong to, found by the trace context (or request
//!   id) the service forwards, minus the margin (C2, C3, C8, C19); a request that arrives
//!   without trace context gets one at the ingress, so that its calls can be matched, and a
//!   call that matches nothing is counted and logged, and gets what the profile's
//!   `sidecar.unmatched` says (C26).
//!
//! Files: [`options`] (the command line), `ingress` (the per-request stack), `restate` (the
//! carriers), `upstream` (the client), `paired` (an HTTP/1.1 caller's own connection to the
//! service), `answer` (failed calls), `trace_context` (trace context started at the ingress),
//! `hygiene` (what never reaches the service), `client_waits` (slow and idle callers), `tunnel` (WebSocket), `tls` (TLS on the ingress), `registry` (requests in flight by trace context), `egress` (outbound calls), `serve` (accepting and the clean
//! stop), `admin` (`/metrics`), `log_fields` (the log lines' fields), `spans` (a span per
//! request and per egress call, `--otlp-endpoint`) and `export` (where they are sent).
//!
//! Not yet: TLS to the service and to egress destinations.

mod admin;
mod answer;
mod body;
mod caller_body;
mod client_waits;
mod egress;
mod export;
mod hygiene;
mod ingress;
mod log_fields;
mod logging;
pub mod options;
mod origination;
mod paired;
mod registry;
mod reload;
mod restate;
mod serve;
mod spans;
mod stream_deadline;
mod tls;
mod trace_context;
mod tunnel;
mod upstream;
mod upstream_limit;

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use hopbudget::grpc::server::{DeclaredMethods, DescriptorSetError};
use hopbudget::{Profile, SharedProfile};

pub use options::ProxyArgs;

/// How long requests in flight get after the stop signal, beyond the largest budget the
/// profile admits: the answer still has to be written.
const DRAIN_SLACK: Duration = Duration::from_secs(1);

/// Run the proxy until SIGTERM or Ctrl-C. Exit status 2 for a bad profile or an address that
/// cannot be bound, 1 when requests were still running after the drain bound.
pub fn run(args: &ProxyArgs) -> ExitCode {
    let (profile, file) = match load_profile(args) {
        Ok(loaded) => loaded,
        Err(message) => {
            eprintln!("hopbudget proxy: {message}");
            return ExitCode::from(2);
        }
    };
    let methods = match load_methods(&args.descriptor_set) {
        Ok(methods) => methods,
        Err(error) => {
            eprintln!("hopbudget proxy: {error}");
            return ExitCode::from(2);
        }
    };
    logging::init(args.otlp_endpoint.is_some(), args.log_format);
    // One thread is a current-thread runtime: every task runs on the thread that accepts,
    // with no work-stealing queues and no wake-ups across threads (nginx's one worker
    // process); more is the multi-thread scheduler with that many workers.
    let mut builder = if args.threads.get() == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(args.threads.get());
        builder
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("hopbudget proxy: cannot start the runtime: {error}");
            return ExitCode::from(2);
        }
    };
    runtime.block_on(run_async(args, profile, file, &methods))
}

/// The gRPC methods of every `--descriptor-set`, labelled from their first call (C20).
fn load_methods(files: &[std::path::PathBuf]) -> Result<DeclaredMethods, DescriptorSetError> {
    let mut methods = DeclaredMethods::default();
    for file in files {
        methods.merge(DeclaredMethods::read(file)?);
    }
    Ok(methods)
}

/// The profile to start with, and the file it came from with its content's hash.
fn load_profile(args: &ProxyArgs) -> Result<(Profile, Option<(reload::ProfileFile, u64)>), String> {
    match &args.profile {
        Some(path) => {
            let file = reload::ProfileFile {
                path: path.clone(),
                no_hop_log: args.no_hop_log,
            };
            let (profile, hash) = file.load()?;
            Ok((profile, Some((file, hash))))
        }
        None => Ok((
            reload::with_hop_line(Profile::default(), args.no_hop_log)?,
            None,
        )),
    }
}

async fn run_async(
    args: &ProxyArgs,
    profile: Profile,
    file: Option<(reload::ProfileFile, u64)>,
    methods: &DeclaredMethods,
) -> ExitCode {
    let drain = profile.max() + DRAIN_SLACK;
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("hopbudget proxy: cannot listen on {}: {error}", args.listen);
            return ExitCode::from(2);
        }
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => match tls::acceptor(cert, key) {
            Ok(acceptor) => Some(acceptor),
            Err(message) => {
                eprintln!("hopbudget proxy: {message}");
                return ExitCode::from(2);
            }
        },
        _ => None,
    };
    let mut out = std::io::stdout().lock();
    if let Some(admin) = args.admin {
        match start_admin(admin).await {
            Ok(bound) => {
                let _ = writeln!(out, "admin on {bound}");
            }
            Err(message) => {
                eprintln!("hopbudget proxy: {message}");
                return ExitCode::from(2);
            }
        }
    }
    let export = match &args.otlp_endpoint {
        Some(endpoint) => match export::Export::start(
            endpoint,
            profile.service(),
            profile.spec().sidecar.sample_ratio,
        ) {
            Ok(export) => Some(export),
            Err(message) => {
                eprintln!("hopbudget proxy: {message}");
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let spans = export.as_ref().map(|e| spans::Spans::new(e.provider()));
    let shared = SharedProfile::new(profile);
    // SIGHUP or a changed file puts a new profile in force (C24); a bad one is refused.
    let _reloader = file.map(|(file, hash)| file.watch(shared.clone(), hash, args.profile_poll));
    let egress_wanted = args.egress.is_some() || !args.egress_to.is_empty();
    let registry = egress_wanted.then(|| registry::Registry::new(args.request_id_header.clone()));
    let starter = egress_wanted.then(|| {
        let ratio = shared.current().spec().sidecar.sample_ratio;
        trace_context::Starter::new(ratio, args.request_id_header.clone())
    });
    let max_connections = args
        .max_connections
        .map_or_else(client_waits::default_max_connections, |n| n.get());
    let to_service = (args.upstream.tls || args.upstream_tls)
        .then(|| {
            origination::Origination::new(
                &args.upstream.authority,
                args.upstream_ca.as_deref(),
                "--upstream-ca",
            )
        })
        .transpose();
    let upstream = match to_service.and_then(|tls| {
        upstream::Upstream::new(
            args.upstream.authority.clone(),
            args.upstream_protocol,
            args.upstream_idle_timeout,
            tls,
        )
    }) {
        Ok(upstream) => upstream,
        Err(message) => {
            eprintln!("hopbudget proxy: {message}");
            return ExitCode::from(2);
        }
    };
    let upstream = upstream.with_limit(upstream_limit::UpstreamLimit::new(
        args.upstream_max_connections
            .map_or(max_connections, |n| n.get()),
    ));
    let ingress = ingress::Ingress::new(
        shared.clone(),
        upstream,
        args.upstream_carrier,
        registry.clone(),
        starter,
        args.tunnel_max,
        methods,
    )
    .with_spans(spans.clone());
    let waits = client_waits::ClientLimits {
        header_read: args.header_read_timeout,
        idle: args.idle_timeout,
        body_read: args.body_read_timeout,
        max_streams: args.max_streams,
    };
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(max_connections));
    let mut egress_listeners = Vec::new();
    if let Some(registry) = registry {
        match bind_egress(args, shared, registry, &mut out).await {
            Ok(listeners) => egress_listeners = listeners,
            Err(message) => {
                eprintln!("hopbudget proxy: {message}");
                return ExitCode::from(2);
            }
        }
    }
    if let Ok(addr) = listener.local_addr() {
        let _ = writeln!(out, "listening on {addr}, upstream {}", args.upstream);
    }
    let _ = out.flush();
    drop(out);
    // The egress listeners stop after the ingress has drained: a request in flight may still
    // call out while it finishes.
    let (stop_egress, stopped) = tokio::sync::watch::channel(false);
    let mut egress = tokio::task::JoinSet::new();
    for (listener, service) in egress_listeners {
        let mut stopped = stopped.clone();
        let stop = async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        };
        let service = service.with_spans(spans.clone());
        let slots = slots.clone();
        egress.spawn(serve::serve(
            listener, service, waits, slots, None, stop, drain,
        ));
    }
    let mut drained = serve::serve(
        listener,
        ingress,
        waits,
        slots,
        tls,
        serve::stop_signal(),
        drain,
    )
    .await;
    let _ = stop_egress.send(true);
    while let Some(done) = egress.join_next().await {
        drained &= done.unwrap_or(false);
    }
    // The spans of the last requests go out before the proxy exits.
    if let Some(export) = export {
        export.shutdown().await;
    }
    if drained {
        tracing::info!("stopped; every request in flight ended");
        ExitCode::SUCCESS
    } else {
        tracing::warn!("stopped with requests still running after the drain bound");
        ExitCode::from(1)
    }
}

/// Bind `--egress` and every `--egress-to`, saying where on stdout.
async fn bind_egress(
    args: &ProxyArgs,
    shared: SharedProfile,
    registry: std::sync::Arc<registry::Registry>,
    out: &mut impl Write,
) -> Result<Vec<(tokio::net::TcpListener, egress::Egress)>, String> {
    // Each destination gets the carrier its own stack reads: `grpc-timeout` for gRPC.
    let egress = egress::Egress::new(
        shared,
        registry,
        options::UpstreamCarrier::Auto,
        args.upstream_idle_timeout,
        args.egress_allow.clone(),
    )?;
    let mut listeners = Vec::new();
    let bind = |addr: std::net::SocketAddr| async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot listen on {addr} (egress): {e}"))?;
        let bound = listener.local_addr().map_err(|e| e.to_string())?;
        Ok::<_, String>((listener, bound))
    };
    // The egress carries the service's calls anywhere: reachable from elsewhere, it is an
    // open proxy (#46 item 8).
    for addr in args
        .egress
        .iter()
        .chain(args.egress_to.iter().map(|(a, _)| a))
    {
        if !addr.ip().is_loopback() {
            tracing::warn!(
                listen = %addr,
                "an egress listener on a non-loopback address: whoever reaches it can send \
                 calls through the proxy; keep it on 127.0.0.1 unless the service runs elsewhere, \
                 and give --egress an --egress-allow list"
            );
        }
    }
    if let Some(addr) = args.egress {
        let (listener, bound) = bind(addr).await?;
        let _ = writeln!(out, "egress on {bound}");
        listeners.push((listener, egress.clone()));
    }
    for (addr, to) in &args.egress_to {
        let (listener, bound) = bind(*addr).await?;
        let _ = writeln!(out, "egress to {to} on {bound}");
        let tls = to
            .tls
            .then(|| {
                origination::Origination::new(
                    &to.authority,
                    args.egress_ca.as_deref(),
                    "--egress-ca",
                )
            })
            .transpose()?;
        let upstream = upstream::Upstream::new(
            to.authority.clone(),
            options::UpstreamProtocol::Auto,
            args.upstream_idle_timeout,
            tls,
        )?;
        listeners.push((
            listener,
            egress.to(egress::Destination::Fixed(Box::new(upstream))),
        ));
    }
    Ok(listeners)
}

/// Install the Prometheus recorder and serve it; the bound address.
async fn start_admin(addr: std::net::SocketAddr) -> Result<std::net::SocketAddr, String> {
    let handle = hopbudget::observe::prometheus::builder()
        .and_then(|b| b.install_recorder())
        .map_err(|e| format!("cannot install the metrics recorder: {e}"))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr} (--admin): {e}"))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    let upkeep = handle.clone();
    tokio::spawn(async move {
        // Histograms are folded into their buckets here, not on the request path.
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    tokio::spawn(admin::serve(listener, handle));
    Ok(bound)
}
