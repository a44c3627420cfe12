//! Programs written in Go, built by the tests that use them: `go build` of a directory under
//! the workspace's `interop/` into the test target's scratch directory, with
//! `GO111MODULE=off` and `GOPATH` pointing at Debian's Go sources (`/usr/share/gocode`), where
//! `golang-google-grpc-dev` puts grpc-go. No module download is needed, so it builds on a
//! machine that reaches only Debian's packages. The library's interop tests and the
//! `hopbudget-cli` proxy tests share this file.
//!
//! `HOPBUDGET_GO` names the `go` command (default `go`), `HOPBUDGET_GOPATH` the sources. Without
//! them a test says what to install and passes, unless `HOPBUDGET_REQUIRE_SERVICES=1` (CI),
//! where it fails.
#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;

/// Build the workspace's `interop/<name>` (a Go `main` package); `Err` says what is missing.
/// `packages` names the Debian packages it needs beside `golang-go`.
pub fn build(name: &str, packages: &str) -> Result<PathBuf, String> {
    let go = std::env::var("HOPBUDGET_GO").unwrap_or_else(|_| "go".into());
    let gopath = std::env::var("HOPBUDGET_GOPATH").unwrap_or_else(|_| "/usr/share/gocode".into());
    let install = format!("apt-get install golang-go {packages}");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("go");
    let out = dir.join(name);
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../interop")
        .join(name);
    let built = std::process::Command::new(&go)
        .args(["build", "-o"])
        .arg(&out)
        .arg(".")
        .current_dir(&source)
        .env("GO111MODULE", "off")
        .env("GOPATH", &gopath)
        .env("GOFLAGS", "")
        // Go needs a build cache; a CI job may have no `$HOME` to put it in.
        .env("GOCACHE", dir.join("cache"))
        .output();
    match built {
        Ok(o) if o.status.success() => Ok(out),
        Ok(o) => Err(format!(
            "`{go} build` of {} failed (with GOPATH={gopath}; {install}):\n{}",
            source.display(),
            String::from_utf8_lossy(&o.stderr)
        )),
        Err(e) => Err(format!(
            "cannot run `{go}` ({e}): {install} (or set HOPBUDGET_GO / HOPBUDGET_GOPATH)"
        )),
    }
}

/// The built program, or `None` after saying why the test is skipped; under
/// `HOPBUDGET_REQUIRE_SERVICES=1` a program that cannot be built fails the test.
pub fn skip_unless_built(built: &Result<PathBuf, String>) -> Option<PathBuf> {
    match built {
        Ok(path) => Some(path.clone()),
        Err(message) => {
            assert!(
                std::env::var("HOPBUDGET_REQUIRE_SERVICES").as_deref() != Ok("1"),
                "{message}"
            );
            eprintln!("skipped: {message}");
            None
        }
    }
}

/// [`skip_unless_built`], as a command to start the program.
pub fn peer(built: &Result<PathBuf, String>) -> Option<tokio::process::Command> {
    skip_unless_built(built).map(tokio::process::Command::new)
}
