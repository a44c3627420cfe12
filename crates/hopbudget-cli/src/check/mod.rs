//! `hopbudget check --target URL --downstream ADDR`: a black-box check of any service's
//! deadline behaviour (issue #47, rules [C28] and [S26] of `docs/contract.md`).
//!
//! The service under test is configured to call its downstream at ADDR; the checker listens
//! there, so it plays both the caller and the callee. Each case sends one request on its own
//! connection ([`cases`]), the [`downstream`] records what the service told it, and the
//! [`scorecard`] prints one line per rule. HTTP only for now (the `x-request-timeout-ms`
//! carrier, with Envoy's header for the tightest-carrier case).
//!
//! [C28]: hopbudget::contract#c28
//! [S26]: hopbudget::contract#s26

pub mod caller;
pub mod cases;
pub mod downstream;
pub mod scorecard;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::Args;

use caller::Target;
use cases::{Abort, Run};
use downstream::Downstream;
use scorecard::Scorecard;

/// `hopbudget check` arguments.
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// The service under test: `http://HOST:PORT[/PATH]`.
    #[arg(long)]
    pub target: String,
    /// Where the service is configured to call its downstream; the checker listens there.
    #[arg(long)]
    pub downstream: SocketAddr,
    /// The request path (default: the target URL's path, or `/`).
    #[arg(long)]
    pub route: Option<String>,
    /// The service's refuse threshold in milliseconds (C3), instead of finding it by bisection.
    #[arg(long, value_name = "MS")]
    pub min_budget: Option<u64>,
    /// A second downstream the service calls that it must not trust: the checker listens
    /// there too, and expects no deadline header to reach it (C19). On loopback the profile
    /// must not trust this address (the default trusts 127/8).
    #[arg(long, value_name = "ADDR")]
    pub third_party: Option<SocketAddr>,
    /// gRPC cases for SERVICE/METHOD: not implemented yet (exit 2).
    #[arg(long, value_name = "SERVICE/METHOD")]
    pub grpc: Option<String>,
    /// Print the scorecard as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Run `hopbudget check`: 0 when every rule passed, 1 when one failed, 2 on bad input.
pub fn run(args: &CheckArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("hopbudget check: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(check(args)) {
        Ok(card) => {
            if args.json {
                println!("{}", card.json());
            } else {
                print!("{}", card.text());
            }
            if card.all_not_applicable() {
                eprintln!("hopbudget check: every case was not applicable: nothing was checked");
            }
            card.exit_code()
        }
        Err(message) => {
            eprintln!("hopbudget check: {message}");
            ExitCode::from(2)
        }
    }
}

/// Run every case and gather the scorecard; `Err` is bad input.
pub async fn check(args: &CheckArgs) -> Result<Scorecard, Abort> {
    if let Some(method) = &args.grpc {
        return Err(format!(
            "--grpc {method}: the gRPC cases are not implemented yet; check the service over HTTP"
        ));
    }
    let target = parse_target(&args.target, args.route.as_deref()).await?;
    let downstream = Downstream::bind(args.downstream).await?;
    let total = downstream.total.clone();
    let bound = downstream.addr();
    let mut run = Run::new(
        target,
        downstream,
        args.min_budget.map(Duration::from_millis),
    );
    if let Some(addr) = args.third_party {
        run.third_party =
            Some(Downstream::bind_as(addr, "third-party", downstream::Mode::Plain).await?);
    }
    let mut lines = Vec::new();
    lines.extend(run.c1_c2().await?);
    lines.push(run.c8().await?);
    lines.push(run.c9().await?);
    lines.push(run.tightest().await?);
    lines.push(run.malformed().await?);
    lines.extend(run.c4_c10().await?);
    lines.push(run.c5().await?);
    lines.push(run.c6().await?);
    lines.push(run.c19().await?);
    lines.push(run.c3().await?);
    if total.load(Ordering::SeqCst) == 0 {
        return Err(format!(
            "the service never called the downstream at {bound}: is it configured to call there? \
             (misconfigured, not passing)"
        ));
    }
    Ok(Scorecard {
        target: args.target.clone(),
        downstream: bound.to_string(),
        lines,
    })
}

/// `http://HOST:PORT[/PATH]` to an address and a path; anything else is an error naming it.
async fn parse_target(url: &str, route: Option<&str>) -> Result<Target, Abort> {
    let bad = |why: &str| format!("--target {url:?}: {why}");
    let uri: http::Uri = url.parse().map_err(|e| bad(&format!("not a URL ({e})")))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(other) => return Err(bad(&format!("scheme {other} is not supported (http only)"))),
        None => return Err(bad("no scheme: write http://HOST:PORT")),
    }
    let authority = uri.authority().ok_or_else(|| bad("no host"))?;
    let port = authority.port_u16().unwrap_or(80);
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let addr = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| bad(&format!("cannot resolve {host}: {e}")))?
        .next()
        .ok_or_else(|| bad(&format!("{host} resolves to no address")))?;
    let path = match route {
        Some(r) if r.starts_with('/') => r.to_owned(),
        Some(r) => return Err(format!("--route {r:?}: a path starts with '/'")),
        None => uri
            .path_and_query()
            .map_or("/".to_owned(), |p| p.as_str().to_owned()),
    };
    Ok(Target {
        addr,
        host: authority.as_str().to_owned(),
        path,
    })
}
