//! `hopbudget-demo serve SERVICE --topology FILE`: run one service of a demo topology alone, so the
//! same graph can run one process per host, as an operator would run it.
//!
//! The service listens on its `addr` from the topology (or `--port` on 127.0.0.1, or
//! `--listen ADDR`) and reaches its downstream services at their `addr` in the topology, or at
//! the address given with `--peer NAME=ADDR`. Its behaviour (latency, concurrency, faults,
//! mode) is exactly the one `hopbudget-demo demo` runs in process. `--profile FILE` runs its
//! hopbudget layers with an adoption profile of the operator's (C15). It serves Prometheus
//! metrics (`observe::prometheus`) on `/metrics` at `--metrics ADDR`, logs one line per hop
//! ([`hop_log`]), and stops cleanly on SIGTERM or Ctrl-C.

/// The request log, at its old path; it lives in [`crate::hop_log`], which the demo's
/// services write too.
pub use crate::hop_log;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hopbudget::profile::RouteSpec;
use hopbudget::{Profile, SharedProfile};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::layer::SubscriberExt;

use crate::demo::collector::Collector;
use crate::demo::node::Node;
use crate::demo::topology::{Protocol, ServiceSpec};
use crate::demo::wire::{GRPC_PATH, HTTP_PATH};
use crate::demo::{Mode, Topology};
use crate::demo::{peer, queue, server, services};

/// What `serve` needs.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The topology.
    pub topology: Topology,
    /// The service to run.
    pub service: String,
    /// Where to listen (overrides the topology's `addr`).
    pub listen: Option<SocketAddr>,
    /// Addresses of peers (override the topology's).
    pub peers: HashMap<String, SocketAddr>,
    /// Mode.
    pub mode: Mode,
    /// Ignore inbound deadlines (S13).
    pub forgetful: bool,
    /// An adoption profile for the service's hopbudget layers (default: the topology's
    /// minimum budget on the default profile).
    pub profile: Option<PathBuf>,
    /// Where to serve `/metrics` (default: 127.0.0.1 on a free port, printed at start).
    pub metrics: Option<SocketAddr>,
    /// How the hop lines are written.
    pub log_format: hop_log::LogFormat,
}

/// Parse `NAME=ADDR`.
pub fn parse_peer(s: &str) -> Result<(String, SocketAddr), String> {
    let (name, addr) = s.split_once('=').ok_or_else(|| {
        format!("--peer `{s}`: expected NAME=ADDR (e.g. reco-scorer=10.0.0.7:7107)")
    })?;
    let addr = addr
        .parse()
        .map_err(|e| format!("--peer `{s}`: `{addr}` is not a socket address: {e}"))?;
    Ok((name.to_string(), addr))
}

/// Resolve every address the service needs, or say which one is missing.
pub fn addresses(opts: &ServeOptions) -> Result<(SocketAddr, Vec<SocketAddr>), String> {
    let topo = &opts.topology;
    let spec = topo.service(&opts.service).ok_or_else(|| {
        format!(
            "no service named `{}` in the topology (services: {})",
            opts.service,
            topo.services
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    for name in opts.peers.keys() {
        if topo.service(name).is_none() {
            return Err(format!("--peer {name}: no such service in the topology"));
        }
    }
    let listen = opts.listen.or(spec.addr).ok_or_else(|| {
        format!(
            "`{}` has no `addr` in the topology: pass --port or --listen",
            spec.name
        )
    })?;
    let unused = SocketAddr::from(([127, 0, 0, 1], 0));
    let mut addrs = Vec::with_capacity(topo.services.len());
    for s in &topo.services {
        let needed = spec.calls.iter().any(|c| c.service == s.name);
        let addr = opts.peers.get(&s.name).copied().or(s.addr);
        match addr {
            Some(a) => addrs.push(a),
            None if needed => {
                return Err(format!(
                    "`{}` calls `{}`, which has no `addr` in the topology: pass --peer {}=ADDR",
                    spec.name, s.name, s.name
                ));
            }
            None => addrs.push(unused),
        }
    }
    Ok((listen, addrs))
}

/// The profile the service's layers run with: `--profile FILE` if given, with the topology's
/// minimum budget added as a route rule when the file has none for the service's path, and
/// its concurrency as the admission section when the file has none;
/// otherwise the built-in one ([`services::profile_for`]).
pub fn profile(spec: &ServiceSpec, file: Option<&PathBuf>) -> Result<Profile, String> {
    let Some(file) = file else {
        return services::profile_for(spec);
    };
    let loaded = Profile::load(file).map_err(|e| e.to_string())?;
    let path = match spec.protocol {
        Protocol::Grpc => GRPC_PATH,
        Protocol::Http => HTTP_PATH,
    };
    let mut profile_spec = loaded.spec().clone();
    if profile_spec.service.is_empty() {
        profile_spec.service = spec.name.clone();
    }
    if profile_spec.admission.is_none() {
        // As the built-in profile: the service's slots as the admission limit (C21).
        profile_spec.admission = services::profile_for(spec)?.spec().admission.clone();
    }
    if loaded.route(path).is_none() && spec.min_budget_ms > 0 {
        profile_spec.routes.push(RouteSpec {
            path: path.into(),
            min_budget_ms: Some(spec.min_budget_ms as i64),
            mode: Default::default(),
            learn: None,
        });
    }
    Profile::from_spec(profile_spec).map_err(|issues| {
        format!(
            "{}: {}",
            file.display(),
            issues
                .iter()
                .map(|i| format!("field `{}`: {}", i.field, i.reason))
                .collect::<Vec<_>>()
                .join("; ")
        )
    })
}

/// Reload `file` on every SIGHUP, completed as at start (see [`profile`]), and put it in force
/// for the next request without a restart (C24). A file that does not load or validate is
/// refused with its reason on stderr, and the running profile is kept.
fn reload_on_hangup(
    shared: &SharedProfile,
    spec: &ServiceSpec,
    file: &std::path::Path,
) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = signal(SignalKind::hangup())?;
    let (shared, spec, file) = (shared.clone(), spec.clone(), file.to_path_buf());
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            match profile(&spec, Some(&file)) {
                Ok(new) => {
                    let enforce = new.enforces();
                    shared.replace(new);
                    println!(
                        "{}: SIGHUP: profile {} reloaded; enforcement {}",
                        spec.name,
                        file.display(),
                        if enforce { "on" } else { "off (observe only)" }
                    );
                }
                // One line per event, for a log: the problems joined with `;`.
                Err(e) => eprintln!(
                    "{}: SIGHUP: profile reload refused, the running profile stays: {}",
                    spec.name,
                    e.lines().map(str::trim).collect::<Vec<_>>().join("; ")
                ),
            }
        }
    });
    Ok(())
}

/// The carriers a profile reads, as header names, for the start-up line.
fn carriers(profile: &Profile) -> String {
    profile
        .inbound()
        .iter()
        .map(|(_, name)| name.as_str().to_owned())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Serve `/metrics` from `handle` on `listener` until `stop`.
fn spawn_metrics(
    handle: PrometheusHandle,
    listener: tokio::net::TcpListener,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let handle = handle.clone();
            async move { handle.render() }
        }),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await;
    })
}

/// Wait for SIGTERM or Ctrl-C; returns which one came.
async fn stop_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                _ = tokio::signal::ctrl_c() => "Ctrl-C",
                _ = term.recv() => "SIGTERM",
            },
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                "Ctrl-C"
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    }
}

/// Run the service until SIGTERM or Ctrl-C.
pub fn run(opts: &ServeOptions) -> Result<(), String> {
    let (listen, addrs) = addresses(opts)?;
    let topo = &opts.topology;
    let idx = topo
        .index_of(&opts.service)
        .ok_or_else(|| format!("no service named `{}`", opts.service))?;
    let spec = topo.services[idx].clone();
    let profile = SharedProfile::new(profile(&spec, opts.profile.as_ref())?);
    let metrics = hopbudget::observe::prometheus::builder()
        .map_err(|e| format!("cannot set up the Prometheus exporter: {e}"))?
        .install_recorder()
        .map_err(|e| format!("cannot install the Prometheus recorder: {e}"))?;
    hopbudget::observe::describe_metrics();
    // One log line per hop from the library's own `hop` span.
    let _ = tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(hop_log::HopLog::new(opts.log_format)),
    );
    let rt = tokio::runtime::Runtime::new().map_err(|e| format!("cannot start tokio: {e}"))?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| format!("{}: cannot listen on {listen}: {e}", spec.name))?;
        let metrics_addr = opts
            .metrics
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
        let metrics_listener = tokio::net::TcpListener::bind(metrics_addr)
            .await
            .map_err(|e| format!("{}: cannot serve metrics on {metrics_addr}: {e}", spec.name))?;
        let http = peer::reqwest_client()?;
        let behaviour = opts.mode.behaviour(opts.forgetful);
        let layers = behaviour.layers();
        // Without a server layer the library logs no hop; the collector does it instead.
        let collector = Arc::new(Collector::for_serve(
            topo.services.len(),
            (!layers.server).then(|| spec.name.clone()),
            opts.log_format,
        ));
        let node = Arc::new(Node {
            idx,
            peers: peer::peers_for(topo, &spec, layers.client, &profile, &addrs, &http)?,
            sem: Semaphore::new(spec.concurrency as usize),
            collector: collector.clone(),
            profile: profile.clone(),
            seed: topo.client.seed,
            degrade: services::degrade_for(&spec),
            queue: spec
                .background
                .as_ref()
                .map(|bg| queue::in_process::start(bg, behaviour.clone(), collector.clone())),
            behaviour,
            spec: spec.clone(),
        });
        let bound = listener.local_addr().map_err(|e| e.to_string())?;
        let metrics_bound = metrics_listener.local_addr().map_err(|e| e.to_string())?;
        let what = match spec.protocol {
            Protocol::Grpc => format!("gRPC {GRPC_PATH}"),
            Protocol::Http => format!("HTTP POST {HTTP_PATH}"),
        };
        println!(
            "{} ({}, {} mode) listening on {bound}; metrics on http://{metrics_bound}/metrics; \
             SIGTERM or Ctrl-C stops it",
            spec.name,
            spec.protocol.as_str(),
            opts.mode.as_str()
        );
        if layers.server {
            println!(
                "{}: serves {what}; reads the budget from {} (the tightest wins)",
                spec.name,
                carriers(&profile.current())
            );
        } else {
            println!(
                "{}: serves {what}; reads no deadline ({} mode)",
                spec.name,
                if opts.forgetful {
                    "forgetful"
                } else {
                    opts.mode.as_str()
                }
            );
        }
        if let Some(file) = &opts.profile {
            reload_on_hangup(&profile, &spec, file)
                .map_err(|e| format!("{}: cannot listen for SIGHUP: {e}", spec.name))?;
            println!(
                "{}: profile {}; SIGHUP reloads it (an invalid one is refused and the running one kept)",
                spec.name,
                file.display()
            );
        }
        let stop = CancellationToken::new();
        let server = server::spawn_server(node, listener, stop.clone());
        let metrics_server = spawn_metrics(metrics, metrics_listener, stop.clone());
        let signal = stop_signal().await;
        stop.cancel();
        // Graceful: in-flight calls finish, within a bound.
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            let _ = server.await;
            let _ = metrics_server.await;
        })
        .await;
        println!("{}: {signal} received, stopped", spec.name);
        Ok(())
    })
}
