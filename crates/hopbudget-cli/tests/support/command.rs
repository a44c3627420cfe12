//! The `hopbudget` binary run as an operator runs it, to its end.

/// Run the `hopbudget` binary: its exit status, standard output and standard error.
pub(crate) fn hopbudget(args: &[&str]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hopbudget"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    (out.status.code(), stdout, stderr)
}
