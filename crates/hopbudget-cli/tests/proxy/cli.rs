//! `hopbudget proxy` as an operator meets it before any request: `--help` says what it reads
//! and writes, and bad input is a clear error naming what was wrong, with exit status 2, never
//! a panic (C15, #37 item 4).

use std::process::Command;

fn proxy(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hopbudget"))
        .arg("proxy")
        .args(args)
        .output()
        .unwrap()
}

/// [`proxy`], failing the test (not hanging it) if the proxy is still running after `limit`:
/// a proxy that wrongly accepts its arguments serves until stopped.
fn proxy_ending_within(limit: std::time::Duration, args: &[&str]) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hopbudget"))
        .arg("proxy")
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let end = std::time::Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > end {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!(
                "the proxy started with {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn help_says_what_the_proxy_reads_and_writes() {
    let _module = crate::support::serial::module(module_path!());
    let out = proxy(&["--help"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "Reads, per request",
        "grpc-timeout",
        "x-request-timeout-ms",
        "Writes to the service",
        "/metrics",
        "SIGTERM",
        "--upstream-carrier",
        "--admin",
    ] {
        assert!(text.contains(needle), "--help lacks {needle:?}:\n{text}");
    }
}

#[test]
fn a_bad_profile_is_refused_at_start_naming_the_file_and_field() {
    let _module = crate::support::serial::module(module_path!());
    let path =
        std::env::temp_dir().join(format!("hopbudget-proxy-bad-{}.yaml", std::process::id()));
    std::fs::write(&path, "hop_margin_ms: lots\n").unwrap();
    let path_text = path.to_str().unwrap();
    let out = proxy(&[
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        "127.0.0.1:9",
        "--profile",
        path_text,
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains(path_text) && err.contains("hop_margin_ms"),
        "{err}"
    );
}

#[test]
fn a_bad_upstream_address_is_named() {
    let _module = crate::support::serial::module(module_path!());
    let out = proxy(&["--listen", "127.0.0.1:0", "--upstream", "ftp://svc:443"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("ftp"), "{err}");
}

/// TLS to the service with a CA file that cannot be read, or that holds no certificate, is
/// refused at start, naming the flag and the file (#46 item 7).
#[test]
fn a_bad_upstream_ca_file_is_named() {
    let _module = crate::support::serial::module(module_path!());
    let empty = std::env::temp_dir().join(format!("hopbudget-empty-ca-{}.pem", std::process::id()));
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let missing = "/nonexistent/ca.pem";
    for ca in [missing, empty.to_str().unwrap()] {
        let out = proxy(&[
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "127.0.0.1:9",
            "--upstream-tls",
            "--upstream-ca",
            ca,
        ]);
        assert_eq!(out.status.code(), Some(2), "{ca}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains("--upstream-ca") && err.contains(ca), "{err}");
    }
    let _ = std::fs::remove_file(&empty);
}

#[test]
fn a_bad_otlp_endpoint_is_named() {
    let _module = crate::support::serial::module(module_path!());
    for (endpoint, needle) in [
        ("https://collector:4318/v1/traces", "https"),
        ("collector:4318", "scheme"),
    ] {
        let out = proxy(&[
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "127.0.0.1:9",
            "--otlp-endpoint",
            endpoint,
        ]);
        assert_eq!(out.status.code(), Some(2), "{endpoint}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(
            err.contains("--otlp-endpoint") && err.contains(needle),
            "{endpoint}: {err}"
        );
    }
}

/// `--descriptor-set` with a file that is not a descriptor set (a profile given by mistake,
/// an empty file) or no file at all is refused at start, naming the file (#50 item 7).
#[test]
fn a_bad_descriptor_set_is_refused_at_start_naming_the_file() {
    let _module = crate::support::serial::module(module_path!());
    let dir = std::env::temp_dir();
    let yaml = dir.join(format!("hopbudget-not-fds-{}.yaml", std::process::id()));
    std::fs::write(&yaml, "service: checkout\nroutes: []\n").unwrap();
    let empty = dir.join(format!("hopbudget-empty-fds-{}.binpb", std::process::id()));
    std::fs::write(&empty, "").unwrap();
    for (file, why) in [
        (yaml.to_str().unwrap(), "not a protobuf descriptor set"),
        (empty.to_str().unwrap(), "not a protobuf descriptor set"),
        ("/nonexistent/api.binpb", "cannot read"),
    ] {
        let out = proxy_ending_within(
            std::time::Duration::from_secs(20),
            &[
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                "127.0.0.1:9",
                "--descriptor-set",
                file,
            ],
        );
        assert_eq!(out.status.code(), Some(2), "{file}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains(file) && err.contains(why), "{file}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}
