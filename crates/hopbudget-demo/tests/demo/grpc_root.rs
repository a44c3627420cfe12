//! A gRPC service can face the client: the demo's client then calls it over gRPC, with the
//! budget in `grpc-timeout` in propagated mode, and every mode runs as with an HTTP edge.

use std::time::Duration;

use crate::support::serial::one_demo_at_a_time;
use hopbudget_demo::demo::{self, DemoOptions, Mode, Topology};

const TOPOLOGY: &str = "
client: { budget_ms: 300, timeout_ms: 600, rate_per_s: 20, duration_s: 1, seed: 7 }
services:
  - name: front
    protocol: grpc
    latency: { p50_ms: 5, p99_ms: 15 }
    concurrency: 64
    timeout_ms: 2000
    min_budget_ms: 10
    calls:
      - service: back
  - name: back
    protocol: http
    latency: { p50_ms: 10, p99_ms: 30 }
    concurrency: 64
    timeout_ms: 2000
    min_budget_ms: 10
";

#[test]
fn a_grpc_service_faces_the_client_in_every_mode() {
    let _demo = one_demo_at_a_time();
    let topology = Topology::from_yaml(TOPOLOGY, "grpc-root.yaml").unwrap();
    assert_eq!(topology.edge().name, "front");
    let mut opts = DemoOptions::new(topology);
    opts.duration = Some(Duration::from_secs(1));
    opts.drain_limit = Duration::from_secs(2);
    let (results, _raw) = demo::run(&opts).unwrap();
    let table = demo::report::table(&results);
    for mode in Mode::ALL {
        let m = results.mode(mode).unwrap();
        assert!(m.requests > 5, "{table}");
        // Far below capacity: every request is answered.
        assert_eq!(m.ok, m.requests, "{mode}\n{table}");
    }
    // In propagated mode the gRPC edge read the client's budget from `grpc-timeout`.
    let p = results.mode(Mode::Propagated).unwrap();
    let edge = p.hops.iter().find(|h| h.service == "front").unwrap();
    let at_edge = edge.budget_at_arrival_p50_ms.unwrap();
    assert!(at_edge > 200 && at_edge < 300, "{table}");
}
