//! `hopbudget check --target URL --downstream ADDR`: a black-box check of any service's
//! deadline behaviour (issue #47, rules [C28] and [S26] of `docs/contract.md`).
//!
//! The service under test is configured to call its downstream at ADDR; the checker listens
//! there, so it plays both the caller and the callee. Each case sends one request on its own
//! connection ([`cases`]), the [`downstream`] records what the service told it, and the
//! [`scorecard`] prints one line per rule. Over HTTP/1.1 the budget goes in
//! `x-request-timeout-ms`; with `--grpc SERVICE/METHOD` the checker makes unary gRPC calls
//! ([`grpc_caller`]) with `grpc-timeout` and plays a gRPC callee (`grpc_callee`); Envoy's
//! header is the second carrier of the tightest-carrier case on both ([`wire`]).
//!
//! [C28]: hopbudget::contract#c28
//! [S26]: hopbudget::contract#s26

pub mod answer;
pub mod call;
pub mod caller;
pub mod cases;
pub mod downstream;
mod grpc_callee;
pub mod grpc_caller;
pub mod scorecard;
pub mod wire;

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
    /// The request path (default: the target URL's path, or `/`); not with `--grpc`.
    #[arg(long)]
    pub route: Option<String>,
    /// The service's refuse threshold in milliseconds (C3), instead of finding it by bisection.
    #[arg(long, value_name = "MS")]
    pub min_budget: Option<u64>,
    /// A second downstream the service calls that it must not trust: the checker listens
    /// there too, and expects no deadline header to reach it (C19). On loopback the profile
    /// must not trust this address (the default trusts 127/8). With `--grpc` it plays a
    /// gRPC callee too.
    #[arg(long, value_name = "ADDR")]
    pub third_party: Option<SocketAddr>,
    /// Call the service with gRPC, unary calls to SERVICE/METHOD (an empty message), the
    /// budget in `grpc-timeout`; the downstream is played as a gRPC callee that answers any
    /// method with an empty message.
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
    let route = match (&args.grpc, &args.route) {
        (Some(_), Some(_)) => {
            return Err("--route and --grpc: give one (--grpc names the path)".into());
        }
        (Some(method), None) => Some(grpc_path(method)?),
        (None, route) => route.clone(),
    };
    let grpc = args.grpc.is_some();
    let mut target = parse_target(&args.target, route.as_deref()).await?;
    target.grpc = grpc;
    let downstream = Downstream::bind(args.downstream, grpc).await?;
    let total = downstream.total.clone();
    let bound = downstream.addr();
    let mut run = Run::new(
        target,
        downstream,
        args.min_budget.map(Duration::from_millis),
    );
    if let Some(addr) = args.third_party {
        run.third_party =
            Some(Downstream::bind_as(addr, "third-party", downstream::Mode::Answer, grpc).await?);
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
        grpc: false,
    })
}

/// `SERVICE/METHOD` (a leading `/` allowed) to the call's path, `/SERVICE/METHOD`.
fn grpc_path(method: &str) -> Result<String, Abort> {
    let trimmed = method.strip_prefix('/').unwrap_or(method);
    match trimmed.split_once('/') {
        Some((service, name))
            if !service.is_empty()
                && !name.is_empty()
                && !name.contains('/')
                && !trimmed.contains(char::is_whitespace) =>
        {
            Ok(format!("/{trimmed}"))
        }
        _ => Err(format!(
            "--grpc {method:?}: write SERVICE/METHOD, as in helloworld.Greeter/SayHello"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::grpc_path;

    #[test]
    fn a_grpc_method_is_service_slash_method() {
        assert_eq!(grpc_path("a.B/C").unwrap(), "/a.B/C");
        assert_eq!(grpc_path("/a.B/C").unwrap(), "/a.B/C");
        for bad in ["a.B", "a.B/", "/C", "a/B/C", "a B/C", ""] {
            assert!(
                grpc_path(bad).unwrap_err().contains("SERVICE/METHOD"),
                "{bad}"
            );
        }
    }
}
