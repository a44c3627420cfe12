//! `hopbudget serve SERVICE --topology FILE`: run one service of a demo topology alone, so the
//! same graph can run one process per host.
//!
//! The service listens on its `addr` from the topology (or `--port` on 127.0.0.1, or
//! `--listen ADDR`) and reaches its downstream services at their `addr` in the topology, or at
//! the address given with `--peer NAME=ADDR`. Its behaviour (latency, concurrency, faults,
//! mode) is exactly the one `hopbudget demo` runs in process.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::demo::collector::Collector;
use crate::demo::queue;
use crate::demo::services::{self, Node};
use crate::demo::wiring;
use crate::demo::{Mode, Topology};

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

/// Run the service until Ctrl-C.
pub fn run(opts: &ServeOptions) -> Result<(), String> {
    let (listen, addrs) = addresses(opts)?;
    let topo = &opts.topology;
    let idx = topo
        .index_of(&opts.service)
        .ok_or_else(|| format!("no service named `{}`", opts.service))?;
    let spec = topo.services[idx].clone();
    let rt = tokio::runtime::Runtime::new().map_err(|e| format!("cannot start tokio: {e}"))?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| format!("{}: cannot listen on {listen}: {e}", spec.name))?;
        let http = wiring::reqwest_client()?;
        let profile = services::profile_for(&spec)?;
        let collector = Arc::new(Collector::new(
            topo.services.len(),
            Duration::from_millis(topo.client.budget_ms),
        ));
        let behaviour = opts.mode.behaviour(opts.forgetful);
        let node = Arc::new(Node {
            idx,
            peers: wiring::peers_for(
                topo,
                &spec,
                behaviour.layers().client,
                &profile,
                &addrs,
                &http,
            )?,
            sem: Semaphore::new(spec.concurrency as usize),
            collector: collector.clone(),
            profile,
            seed: topo.client.seed,
            queue: spec
                .background
                .as_ref()
                .map(|bg| queue::start(bg, behaviour.clone(), collector.clone())),
            behaviour,
            spec: spec.clone(),
        });
        let bound = listener.local_addr().map_err(|e| e.to_string())?;
        println!(
            "{} ({}, {} mode) listening on {bound}; Ctrl-C stops it",
            spec.name,
            spec.protocol.as_str(),
            opts.mode.as_str()
        );
        let stop = CancellationToken::new();
        wiring::spawn_server(node, listener, stop.clone());
        let _ = tokio::signal::ctrl_c().await;
        stop.cancel();
        tokio::time::sleep(Duration::from_millis(100)).await;
        Ok(())
    })
}
