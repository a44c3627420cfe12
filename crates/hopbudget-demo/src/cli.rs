//! Command-line parsing and dispatch for the `hopbudget-demo` binary.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

use crate::demo::{self, DemoOptions, Mode, Topology};
use crate::serve;

/// hopbudget's demo harness: the checkout graph in three modes, one of its services alone, a
/// three-hop soak. (What an operator runs, `audit` and `profile check`, is the `hopbudget`
/// command of the hopbudget-cli crate.)
#[derive(Debug, Parser)]
#[command(name = "hopbudget-demo", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Compare per-hop timeouts with propagated deadlines on a checkout call graph.
    ///
    /// Eight services on loopback, run three times over the same traffic: per-hop timeouts
    /// with detached work, per-hop timeouts with drop-cancellation, and propagated deadlines.
    /// Prints them side by side and writes table.txt, results.json and report.html.
    Demo(DemoArgs),
    /// Run one service of a demo topology alone (one process per host).
    ///
    /// With Prometheus metrics, a log line per hop, and a clean stop on SIGTERM or Ctrl-C.
    #[command(after_help = SERVE_HELP)]
    Serve(ServeArgs),
    /// Load a three-hop chain and check that nothing leaks or is lost (exit 1 if so).
    ///
    /// A fixed rate for a bounded time, with good, short, expiring, cancelled and malformed
    /// requests; then the chain drains and every hop's accounts, tasks and memory are checked.
    Soak(crate::soak::SoakArgs),
}

/// What `hopbudget-demo serve --help` says about the wire, for the operator wiring callers to it.
const SERVE_HELP: &str = "\
What the service answers:
  HTTP service: POST /call, header `x-demo-request-id: <u64>` required (400 without it);
    answers 200 {\"service\": ..., \"degraded\": n}, or 503 + Retry-After: 0 (refused before
    work: too little budget left), 504 (expired), 499 (the caller went away).
  gRPC service: /hopbudget.demo.Hop/Call (proto/demo.proto: HopRequest { request_id }),
    answers HopReply, or DEADLINE_EXCEEDED (expired; marked `x-deadline-outcome: refused`
    with x-deadline-required-ms / x-deadline-remaining-ms when refused), CANCELLED.
Deadline carriers read (propagated mode, default profile; --profile changes the list):
  grpc-timeout, x-request-timeout-ms (relative ms), connect-timeout-ms,
  x-envoy-expected-rq-timeout-ms; the tightest wins. x-request-deadline (absolute epoch ms)
  when the profile lists `epoch-ms`. No deadline: the profile's edge total (edge_total_ms).
Operations:
  GET /metrics on --metrics ADDR (Prometheus text; the hopbudget_* metrics of the guide's
    observability page, docs/guide/observability.md);
  one line per hop on stdout: service, route, budget_ms, source, outcome;
  SIGTERM or Ctrl-C: stop accepting, let in-flight calls finish (at most 5 s), exit 0.";

/// A mode, or all of them (S18).
#[derive(Clone, Copy, Debug, ValueEnum)]
enum ModeArg {
    /// Per-hop fresh timeouts, each handler on a detached task: work goes on after its caller
    /// gave up.
    Detached,
    /// Per-hop fresh timeouts with Rust's drop-cancellation: work stops with its caller, but
    /// no hop knows the time left.
    Timeouts,
    /// hopbudget at every hop: one propagated deadline, refusals, cheaper paths.
    Propagated,
    /// All three, in that order.
    All,
}

/// One mode.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum OneMode {
    /// Per-hop fresh timeouts, the handler on a detached task.
    Detached,
    /// Per-hop fresh timeouts with drop-cancellation.
    Timeouts,
    /// hopbudget's layers.
    Propagated,
}

impl From<OneMode> for Mode {
    fn from(m: OneMode) -> Self {
        match m {
            OneMode::Detached => Mode::Detached,
            OneMode::Timeouts => Mode::Timeouts,
            OneMode::Propagated => Mode::Propagated,
        }
    }
}

/// The callee's tail of `demo --hedge`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum TailArg {
    /// 5-10 ms, 1% of attempts 50-100 ms.
    TenX,
    /// 5 ms, 1% of attempts 180 ms.
    Seeds,
}

impl From<TailArg> for demo::tail::Tail {
    fn from(t: TailArg) -> Self {
        match t {
            TailArg::TenX => demo::tail::Tail::TenX,
            TailArg::Seeds => demo::tail::Tail::Seeds,
        }
    }
}

#[derive(Debug, clap::Args)]
struct DemoArgs {
    /// Topology file (default: the built-in checkout graph, topologies/checkout.yaml).
    #[arg(long)]
    topology: Option<PathBuf>,
    /// Which mode(s) to run.
    #[arg(long, value_enum, default_value = "all")]
    mode: ModeArg,
    /// Arrivals per second (default: the topology's, 40).
    #[arg(long)]
    rate: Option<f64>,
    /// Seconds of arrivals per mode (default: the topology's, 20).
    #[arg(long)]
    duration: Option<f64>,
    /// Also sweep offered load from 0.5x to 3x capacity and chart goodput per mode.
    #[arg(long)]
    sweep: bool,
    /// Seconds of arrivals per sweep point and mode.
    #[arg(long, default_value_t = 4.0)]
    sweep_duration: f64,
    /// Instead of the side-by-side run, step the offered load from capacity to 2x and to 3x
    /// at once and back (S22), every mode, and report how each settled (step.txt, step.json,
    /// and step.html: goodput and admitted p99 per 50 ms window).
    #[arg(long, conflicts_with_all = ["sweep", "forgetful", "traces"])]
    step: bool,
    /// Instead of the side-by-side run, the tail (S21): the same seeded calls to a callee
    /// whose slowest 1% take ten times its median, without and with HedgeLayer (hedge.txt,
    /// hedge.json); --rate (default 500) and --duration (default 20) set the calls.
    #[arg(long, conflicts_with_all = ["sweep", "forgetful", "traces", "step"])]
    hedge: bool,
    /// With --hedge, the callee's tail: ten-x (5-10 ms, 1% of attempts 50-100 ms) or seeds
    /// (the seeds' reco-scorer model sidecar: 5 ms, 1% of attempts on a stale 180 ms model).
    #[arg(long, value_enum, default_value = "ten-x", requires = "hedge")]
    tail: TailArg,
    /// With --hedge, instead: three replicas of the callee, one slow for the middle half of
    /// the run, without hedging and hedging with and without the rule that a hedge goes to
    /// another replica (hedge-replicas.txt, hedge-replicas.json).
    #[arg(long, requires = "hedge")]
    replicas: bool,
    /// Instead of the side-by-side run, the retry wave: the graph at 3x capacity in propagated
    /// mode, the client not retrying, retrying with DeadlineRetry (up to 2 retries), and
    /// retrying through its AdaptiveThrottle; attempts sent per call and per call answered
    /// (retry-wave.txt, retry-wave.json); --duration (default 10) sets the seconds of calls.
    #[arg(long, conflicts_with_all = ["sweep", "forgetful", "traces", "step", "hedge"])]
    retry_wave: bool,
    /// Seconds of each phase of the step (steady, overloaded, steady again).
    #[arg(long, default_value_t = 3.0)]
    step_phase: f64,
    /// This service ignores inbound deadlines and uses its own default timeout (a broken
    /// chain); traces are written as OTLP JSON, for `hopbudget audit` (crate hopbudget-cli).
    #[arg(long, value_name = "SERVICE")]
    forgetful: Option<String>,
    /// Write OTLP JSON traces (one file per mode) even without --forgetful.
    #[arg(long)]
    traces: bool,
    /// Output directory for report.html, results.json, table.txt and traces.
    #[arg(long, default_value = "target/hopbudget-demo")]
    out: PathBuf,
    /// Carry the order-confirmation e-mail (background work) over this NATS server with
    /// JetStream, e.g. nats://127.0.0.1:4222, instead of the in-process queue (the default):
    /// stamped with its deadline in propagated mode, gated before any work, and dead-lettered
    /// when it waited too long.
    #[arg(long, value_name = "nats://HOST:PORT")]
    broker: Option<String>,
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// The service to run.
    service: String,
    /// Topology file (default: the built-in checkout graph, topologies/checkout.yaml).
    #[arg(long)]
    topology: Option<PathBuf>,
    /// Listen on 127.0.0.1:PORT instead of the topology's `addr`.
    #[arg(long)]
    port: Option<u16>,
    /// Listen on this address instead of the topology's `addr`.
    #[arg(long, conflicts_with = "port")]
    listen: Option<std::net::SocketAddr>,
    /// Address of a downstream service, NAME=ADDR (repeatable; overrides the topology).
    #[arg(long, value_name = "NAME=ADDR")]
    peer: Vec<String>,
    /// Behaviour of this service.
    #[arg(long, value_enum, default_value = "propagated")]
    mode: OneMode,
    /// Ignore inbound deadlines and use the service's own default timeout (a broken chain).
    #[arg(long)]
    forgetful: bool,
    /// Adoption profile (YAML) for the service's hopbudget layers; the topology's
    /// min_budget_ms is added as a route rule unless the profile has one for the path.
    #[arg(long, value_name = "FILE")]
    profile: Option<PathBuf>,
    /// Serve Prometheus metrics on http://ADDR/metrics (default: 127.0.0.1 on a free port,
    /// printed at start).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
    /// How the line per hop on stdout is written: `text` (`hop name=value ...`) or `json` (one
    /// object a line, the same fields), for a log pipeline.
    #[arg(long, value_enum, value_name = "FORMAT", default_value = "text")]
    log_format: crate::hop_log::LogFormat,
}

fn load_topology(path: Option<&PathBuf>) -> Result<Topology, String> {
    match path {
        Some(p) => Topology::load(p),
        None => Topology::builtin(),
    }
    .map_err(|e| e.to_string())
}

/// Parse the command line and run it.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => run_demo(args),
        Command::Serve(args) => run_serve(args),
        Command::Soak(args) => return crate::soak::main(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hopbudget-demo: {e}");
            ExitCode::from(2)
        }
    }
}

fn run_demo(args: DemoArgs) -> Result<(), String> {
    let topology = load_topology(args.topology.as_ref())?;
    let mut opts = DemoOptions::new(topology);
    opts.modes = match args.mode {
        ModeArg::All => Mode::ALL.to_vec(),
        ModeArg::Detached => vec![Mode::Detached],
        ModeArg::Timeouts => vec![Mode::Timeouts],
        ModeArg::Propagated => vec![Mode::Propagated],
    };
    opts.rate_per_s = args.rate;
    if let Some(d) = args.duration {
        if !(d.is_finite() && d > 0.0 && d <= 3600.0) {
            return Err(format!(
                "--duration must be above 0 and at most 3600 (got {d})"
            ));
        }
        opts.duration = Some(Duration::from_secs_f64(d));
    }
    if !(args.sweep_duration.is_finite() && args.sweep_duration > 0.0) {
        return Err(format!(
            "--sweep-duration must be above 0 (got {})",
            args.sweep_duration
        ));
    }
    opts.sweep = args.sweep;
    opts.sweep_duration = Duration::from_secs_f64(args.sweep_duration);
    opts.forgetful = args.forgetful.clone();
    opts.broker = args.broker.clone();
    opts.progress = std::io::stdout().is_terminal();
    if args.traces || args.forgetful.is_some() {
        opts.traces = Some(args.out.clone());
        std::fs::create_dir_all(&args.out)
            .map_err(|e| format!("cannot create {}: {e}", args.out.display()))?;
    }
    if args.step {
        return run_step(&opts, args.step_phase, &args.out);
    }
    if args.retry_wave {
        let duration = opts.duration.unwrap_or(Duration::from_secs(10));
        let runs = demo::retry_wave::run(&opts, duration, &demo::retry_wave::Retrying::ALL)?;
        let text = demo::retry_wave::text(&runs, &opts, duration);
        print!("{text}");
        return write_out(
            &args.out,
            [
                ("retry-wave.txt", text),
                ("retry-wave.json", to_json(&runs)?),
            ],
        );
    }
    if args.hedge {
        let mut tail = demo::tail::TailOptions {
            tail: args.tail.into(),
            ..demo::tail::TailOptions::default()
        };
        if let Some(rate) = args.rate {
            if !(rate.is_finite() && rate > 0.0 && rate <= 5_000.0) {
                return Err(format!(
                    "--rate must be above 0 and at most 5000 with --hedge (got {rate})"
                ));
            }
            tail.rate_per_s = rate;
        }
        if let Some(d) = opts.duration {
            tail.duration = d;
        }
        if args.replicas {
            let runs = demo::tail::replicas::run(&tail)?;
            let text = demo::tail::replicas::text(&runs, &tail);
            print!("{text}");
            return write_out(
                &args.out,
                [
                    ("hedge-replicas.txt", text),
                    ("hedge-replicas.json", to_json(&runs)?),
                ],
            );
        }
        return run_hedge(&tail, &args.out);
    }
    let (results, _raw) = demo::run(&opts)?;
    print!("{}", demo::report::table(&results));
    let mut written = demo::report::write_all(&results, &args.out)?;
    if let Some(dir) = &opts.traces {
        written.extend(opts.modes.iter().map(|&m| demo::traces::path_for(dir, m)));
    }
    println!();
    for p in written {
        println!("wrote {}", p.display());
    }
    Ok(())
}

/// `demo --step`: the step to overload, printed and written as step.txt, step.json and
/// step.html (its charts).
fn run_step(opts: &DemoOptions, phase: f64, out: &std::path::Path) -> Result<(), String> {
    if !(phase.is_finite() && (1.0..=600.0).contains(&phase)) {
        return Err(format!(
            "--step-phase must be at least 1 and at most 600 seconds (got {phase})"
        ));
    }
    let runs = demo::step::run(opts, Duration::from_secs_f64(phase))?;
    let text = demo::step::text(&runs);
    print!("{text}");
    write_out(
        out,
        [
            ("step.txt", text),
            ("step.json", to_json(&runs)?),
            ("step.html", demo::report::step_html(&runs)?),
        ],
    )
}

/// `demo --hedge`: the tail with and without hedging, printed and written as hedge.txt and
/// hedge.json.
fn run_hedge(opts: &demo::tail::TailOptions, out: &std::path::Path) -> Result<(), String> {
    let report = demo::tail::run(opts)?;
    let text = demo::tail::text(&report, opts);
    print!("{text}");
    write_out(
        out,
        [("hedge.txt", text), ("hedge.json", to_json(&report)?)],
    )
}

fn to_json(v: &impl serde::Serialize) -> Result<String, String> {
    serde_json::to_string_pretty(v).map_err(|e| e.to_string())
}

/// Write each (file name, body) into `out`, saying so.
fn write_out<const N: usize>(
    out: &std::path::Path,
    files: [(&str, String); N],
) -> Result<(), String> {
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    for (name, body) in files {
        let path = out.join(name);
        std::fs::write(&path, body).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn run_serve(args: ServeArgs) -> Result<(), String> {
    let topology = load_topology(args.topology.as_ref())?;
    let mut peers = HashMap::new();
    for p in &args.peer {
        let (name, addr) = serve::parse_peer(p)?;
        peers.insert(name, addr);
    }
    let listen = args.listen.or(args
        .port
        .map(|p| std::net::SocketAddr::from(([127, 0, 0, 1], p))));
    serve::run(&serve::ServeOptions {
        topology,
        service: args.service,
        listen,
        peers,
        mode: args.mode.into(),
        forgetful: args.forgetful,
        profile: args.profile,
        metrics: args.metrics,
        log_format: args.log_format,
    })
}
