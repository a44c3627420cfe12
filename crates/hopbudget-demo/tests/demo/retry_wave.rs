//! `hopbudget-demo demo --retry-wave` (issue #48 item 4): the bench's callee behind the edge,
//! over real sockets, at 3x its capacity. Without a throttle the client's retries multiply
//! what it sends (a wave); through the adaptive throttle they stay near what the paused-clock
//! bench (`cargo bench -p hopbudget --bench retry_wave`) shows: 2.39 attempts per call
//! without it, 1.30 with it at K = 2.
//!
//! The bounds sit between the two with room either side, since a debug build on a shared
//! machine answers fewer calls than the model: 2.0 for the wave, 1.5 for the throttle.

use std::path::Path;
use std::time::Duration;

use crate::support::serial::one_demo_at_a_time;
use hopbudget_demo::demo::retry_wave::{self, Retrying};
use hopbudget_demo::demo::{DemoOptions, Topology};

#[test]
fn the_throttle_keeps_the_retry_wave_down_over_real_sockets() {
    let _demo = one_demo_at_a_time();
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("topologies/retry-wave.yaml");
    let opts = DemoOptions::new(Topology::load(&file).unwrap());
    let runs = retry_wave::run(&opts, Duration::from_secs(3), &Retrying::ALL).unwrap();
    let table = retry_wave::text(&runs, &opts, Duration::from_secs(3));
    let get = |way: Retrying| runs.iter().find(|r| r.retrying == way).unwrap();
    let (off, wave, throttled) = (
        get(Retrying::Off),
        get(Retrying::Unthrottled),
        get(Retrying::Throttled),
    );
    // The same seeded calls in every run; without retries one attempt each.
    assert!(off.calls > 1_000, "{table}");
    assert_eq!(wave.calls, off.calls, "{table}");
    assert_eq!(throttled.calls, off.calls, "{table}");
    assert_eq!(off.attempts, off.calls, "{table}");
    // The callee answers some of them in every run: it is overloaded, not down.
    assert!(off.answered > 0 && throttled.answered > 0, "{table}");
    assert!(
        wave.amplification() > 2.0,
        "no wave without the throttle:\n{table}"
    );
    assert!(
        throttled.amplification() < 1.5,
        "the throttle let the wave through:\n{table}"
    );
}
