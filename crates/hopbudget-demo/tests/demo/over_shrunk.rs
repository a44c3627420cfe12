//! Scenario S6: when most calls to a leaf are refused, the demo reports an entry budget too
//! small for the chain depth, not a failure of the leaf.

use std::time::Duration;

use crate::support::serial::one_demo_at_a_time;
use hopbudget_demo::demo::{self, DemoOptions, Mode, Topology};

#[test]
fn a_budget_too_small_for_the_chain_depth_is_reported_as_such() {
    let _demo = one_demo_at_a_time();
    let mut topology = Topology::builtin().unwrap();
    // reco-scorer, four hops down, without its cheaper path needs 180 ms (its model); with
    // 250 ms at the client, about 90 ms reach it.
    let reco = topology
        .services
        .iter_mut()
        .find(|s| s.name == "reco-scorer")
        .unwrap();
    reco.degrade = None;
    reco.min_budget_ms = 180;
    topology.client.budget_ms = 250;
    topology.client.rate_per_s = 20.0;
    let mut opts = DemoOptions::new(topology);
    opts.modes = vec![Mode::Propagated];
    opts.duration = Some(Duration::from_secs(3));
    opts.drain_limit = Duration::from_secs(3);
    let (results, _raw) = demo::run(&opts).unwrap();
    let table = demo::report::table(&results);
    let p = results.mode(Mode::Propagated).unwrap();

    let reco = p
        .over_shrunk
        .iter()
        .find(|o| o.leaf == "reco-scorer")
        .unwrap_or_else(|| panic!("reco-scorer reported as over-shrunk\n{table}"));
    assert_eq!(reco.depth, 4, "{table}");
    assert!(reco.refused_pct > 50.0, "{table}");
    assert_eq!(reco.needs_ms, 180);
    assert!(
        reco.entry_budget_needed_ms > 250 && reco.entry_budget_needed_ms < 500,
        "the suggested entry budget covers what the chain spends plus what the leaf needs: {}\n{table}",
        reco.entry_budget_needed_ms
    );
    // The shallow leaves have enough and are not blamed.
    assert!(
        p.over_shrunk.iter().all(|o| o.leaf == "reco-scorer"),
        "{table}"
    );
    assert!(
        table.contains("entry budget too small for this chain depth (S6)"),
        "{table}"
    );
}
