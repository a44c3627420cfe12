//! The `hopbudget` command; see [`hopbudget_cli::cli`].

fn main() -> std::process::ExitCode {
    hopbudget_cli::cli::main()
}
