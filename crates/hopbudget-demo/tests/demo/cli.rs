//! The `hopbudget-demo demo` command line: bad input gets a clear error naming what was wrong
//! (file, field, reason) and exit status 2, never a panic.

use std::process::Command;

const TOPOLOGY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/topologies/checkout.yaml");

fn demo(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hopbudget-demo"))
        .arg("demo")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_bad_topology_is_named_with_file_field_and_reason() {
    let text = std::fs::read_to_string(TOPOLOGY)
        .unwrap()
        .replace("concurrency: 6\n", "concurrency: 0\n");
    let path = std::env::temp_dir().join(format!("bad-topology-{}.yaml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let (code, err) = demo(&["--topology", path.to_str().unwrap()]);
    let _ = std::fs::remove_file(&path);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains(path.to_str().unwrap()), "{err}");
    assert!(
        err.contains("field `services[7].concurrency`: must be greater than zero"),
        "{err}"
    );
}

#[test]
fn bad_options_are_refused_before_anything_runs() {
    let (code, err) = demo(&["--rate", "0"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--rate must be above 0"), "{err}");
    let (code, err) = demo(&["--forgetful", "nobody", "--duration", "1"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--forgetful nobody: no such service"), "{err}");
    let (code, err) = demo(&["--duration=0"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--duration"), "{err}");
}

#[test]
fn a_tail_is_one_of_the_named_ones_and_only_with_hedge() {
    let (code, err) = demo(&["--hedge", "--tail", "fat"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("invalid value 'fat' for '--tail") && err.contains("ten-x, seeds"),
        "{err}"
    );
    let (code, err) = demo(&["--tail", "seeds"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--hedge"), "{err}");
}
