//! Command-line parsing and dispatch for the `hopbudget` binary.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::audit::command::{self, AuditArgs, GenTracesArgs};
use crate::check::{self, CheckArgs};
use crate::profile_cmd;
use crate::proxy::{self, ProxyArgs};

/// End-to-end deadline propagation across service hops, for operators: check adoption
/// profiles, audit traces for lost deadlines, run a sidecar that keeps them for any service.
#[derive(Debug, Parser)]
#[command(name = "hopbudget", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check adoption profiles (the per-service YAML the hopbudget layers read).
    Profile {
        #[command(subcommand)]
        command: ProfileCommand,
    },
    /// Find where deadlines get lost, from OTLP traces: files, `--listen` (OTLP/HTTP),
    /// `--kafka` (the Collector's Kafka exporter), or `--merge` of reports (exit 1 when a hop
    /// resets the budget).
    Audit(Box<AuditArgs>),
    /// Write synthetic OTLP JSON traces of the checkout graph (for measuring `audit`).
    #[command(hide = true)]
    GenTraces(GenTracesArgs),
    /// Run a sidecar in front of a service in any language: read, refuse, restate and enforce
    /// its deadlines (HTTP/1.1, h2c, gRPC).
    #[command(long_about = crate::proxy::options::HELP)]
    Proxy(Box<ProxyArgs>),
    /// Check any service's deadline behaviour from outside: play its caller and its
    /// downstream, print a scorecard of the contract's rules (exit 1 when one fails, 2 on bad
    /// input).
    Check(CheckArgs),
}

#[derive(Debug, Subcommand)]
enum ProfileCommand {
    /// Validate a profile; print it resolved, or every problem and exit with status 2.
    Check {
        /// The profile file (YAML).
        file: PathBuf,
    },
}

/// Parse the command line and run it.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Profile {
            command: ProfileCommand::Check { file },
        } => profile_cmd::check(&file),
        Command::Audit(args) => command::audit(&args),
        Command::Proxy(args) => proxy::run(&args),
        Command::Check(args) => check::run(&args),
        Command::GenTraces(args) => match command::gen_traces(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("hopbudget: {e}");
                ExitCode::from(2)
            }
        },
    }
}
