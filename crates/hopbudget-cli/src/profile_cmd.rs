//! `hopbudget profile check`.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use hopbudget::Profile;

/// Print the resolved profile (exit 0) or its problems (exit 2).
pub fn check(file: &Path) -> ExitCode {
    match Profile::load(file) {
        Ok(profile) => {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "# {}: valid; resolved profile follows", file.display());
            let _ = out.write_all(profile.to_yaml().as_bytes());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
    }
}
