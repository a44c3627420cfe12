//! Services written in Go, built by the tests that use them: `go build` of a directory under
//! the workspace's `interop/` into the target dir, with `GO111MODULE=off` and `GOPATH` at
//! Debian's Go sources (`/usr/share/gocode`, where `golang-google-grpc-dev` puts grpc-go), so
//! no module download is needed. As in the library's interop tests: `HOPBUDGET_GO` names the
//! `go` command, `HOPBUDGET_GOPATH` the sources; without them a test says what to install and
//! passes, unless `HOPBUDGET_REQUIRE_SERVICES=1`, where it fails.

use std::path::PathBuf;

// Not every test file that includes this module names it.
#[allow(unused_imports)]
pub use super::service::Service as GoService;

/// Build `interop/<name>`; `Err` says what is missing. `packages`: the Debian packages it
/// needs beside `golang-go`.
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
            "`{go} build` of {} failed (GOPATH={gopath}; {install}):\n{}",
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
