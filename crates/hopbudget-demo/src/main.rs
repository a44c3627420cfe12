//! The `hopbudget-demo` command; see [`hopbudget_demo::cli`].

fn main() -> std::process::ExitCode {
    hopbudget_demo::cli::main()
}
