//! The `hopbudget` command.
//!
//! - `hopbudget profile check FILE`: validate an adoption profile and print it resolved, or
//!   print every problem (file, field, reason) and exit with status 2.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod profile_cmd;

/// End-to-end deadline propagation across service hops.
#[derive(Debug, Parser)]
#[command(name = "hopbudget", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Work with adoption profiles.
    Profile {
        #[command(subcommand)]
        command: ProfileCommand,
    },
}

#[derive(Debug, Subcommand)]
enum ProfileCommand {
    /// Validate a profile; print it resolved, or every problem and exit with status 2.
    Check {
        /// The profile file (YAML).
        file: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Profile {
            command: ProfileCommand::Check { file },
        } => profile_cmd::check(&file),
    }
}
