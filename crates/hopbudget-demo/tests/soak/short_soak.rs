//! `hopbudget-demo soak` for a few seconds, in process: the chain drains, nothing is lost at any
//! hop, and the live task count returns to its baseline. CI runs the command itself for 60 s.

use hopbudget_demo::soak::{SoakArgs, SoakOptions, run};

#[test]
fn a_short_soak_passes_every_check() {
    let opts = SoakOptions::from_args(&SoakArgs {
        duration: 4.0,
        rate: 50.0,
        warmup: None,
        overload: None,
    })
    .unwrap();
    let report = run(&opts).unwrap();
    println!("{}", report.text);
    for check in &report.checks {
        assert!(
            check.ok,
            "{}: {}\n{}",
            check.name, check.detail, report.text
        );
    }
    // The mix reached every hop: the leaf saw good, short (refused), and cancelled requests.
    assert!(report.text.contains("leaf"), "{}", report.text);
}

#[test]
fn a_short_overload_stays_up_and_refuses() {
    let opts = SoakOptions::from_args(&SoakArgs {
        duration: 3.0,
        rate: 1.0,
        warmup: None,
        overload: Some(3.0),
    })
    .unwrap();
    let report = run(&opts).unwrap();
    println!("{}", report.text);
    for check in &report.checks {
        assert!(
            check.ok,
            "{}: {}\n{}",
            check.name, check.detail, report.text
        );
    }
    assert!(report.text.contains("overload: goodput"), "{}", report.text);
}
