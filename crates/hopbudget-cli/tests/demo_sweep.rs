//! `hopbudget demo --sweep`: offered load from 0.5x to 3x the graph's capacity. With
//! propagated deadlines the graph degrades rather than collapses (seed 003's claim), so past
//! capacity its goodput stays above both per-hop-timeouts graphs'.

use std::time::Duration;

use hopbudget_cli::demo::{self, DemoOptions, Mode, Topology};

#[test]
fn past_capacity_the_budgeted_graph_keeps_its_goodput() {
    let mut opts = DemoOptions::new(Topology::builtin().unwrap());
    // No headline runs: only the sweep, one second per point and mode.
    opts.duration = Some(Duration::from_millis(500));
    opts.sweep = true;
    opts.sweep_duration = Duration::from_secs(1);
    opts.drain_limit = Duration::from_secs(1);
    let (results, _) = demo::run(&opts).unwrap();
    let factors: Vec<f64> = results.sweep.iter().map(|p| p.load_factor).collect();
    assert_eq!(factors, [0.5, 1.0, 1.5, 2.0, 3.0]);
    let goodput = |factor: f64, mode: Mode| {
        results
            .sweep
            .iter()
            .find(|p| p.load_factor == factor)
            .unwrap()
            .goodput_per_s
            .iter()
            .find(|(m, _)| *m == mode)
            .unwrap()
            .1
    };
    // Generous: at 3x capacity the budgeted graph delivers more than either unbudgeted one
    // (work detached or dropped with its caller), and more than it did at half capacity.
    for baseline in [Mode::Detached, Mode::Timeouts] {
        assert!(
            goodput(3.0, Mode::Propagated) > goodput(3.0, baseline),
            "{baseline}: {:?}",
            results.sweep
        );
    }
    assert!(
        goodput(3.0, Mode::Propagated) > goodput(0.5, Mode::Propagated),
        "{:?}",
        results.sweep
    );
    let html = demo::report::html(&results).unwrap();
    assert!(html.contains("goodput against offered load"));
}
