//! The demo's checkout call graph as eight Go services, each behind its own `hopbudget proxy`
//! with `--egress` (C25, issue #37 item 3): runs `examples/proxy_checkout.sh`, the example a
//! reader runs, with this build's binary and `interop/checkout_node`, and holds what it prints
//! to the contract. Per request it prints, for every hop, what the service was told, how its
//! request ended, and what its proxy recorded.
//!
//! Needs Go (`apt-get install golang-go`), curl and python3 (the script's client and its
//! free-port picker). Without them the test says so and passes, unless
//! `HOPBUDGET_REQUIRE_SERVICES=1`, where it fails. By hand:
//! `cargo test -p hopbudget-cli --test fleet checkout::`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

use crate::support::proxy::go::{build, skip_unless_built};

/// Each service's caller, as in `crates/hopbudget-demo/topologies/checkout.yaml`.
const CALLERS: [(&str, &str); 7] = [
    ("checkout-orchestrator", "edge-gateway"),
    ("cart-svc", "checkout-orchestrator"),
    ("pricing", "checkout-orchestrator"),
    ("tax-calc", "pricing"),
    ("inventory", "checkout-orchestrator"),
    ("warehouse-router", "inventory"),
    ("reco-scorer", "warehouse-router"),
];

/// The path from edge-gateway down to reco-scorer, where the budget runs out.
const RECO_PATH: [&str; 5] = [
    "edge-gateway",
    "checkout-orchestrator",
    "inventory",
    "warehouse-router",
    "reco-scorer",
];

/// What one call through a proxy costs the budget with the default profile: `hop_margin_ms`
/// (5) plus `transit_allowance_ms` (1). A hop's call is restated by its proxy's egress and
/// read again by the next proxy: two of them between what a service is told and what the
/// service it calls is told (C2).
const MARGIN: u64 = 6;

/// Below the default profile's 1000 ms edge total: a hop that lost the deadline would be
/// told about 994 ms, more than its caller, and the checks below would see it. Far above
/// the 122 ms of work on the longest path, so a busy machine does not make a request expire.
const BUDGET: u64 = 900;

/// One hop's line in the script's report.
#[derive(Debug)]
struct Hop {
    forgetful: bool,
    /// What its service was told; `None` when the request never reached the service.
    told: Option<u64>,
    /// The outcome its proxy recorded.
    proxy: String,
    /// How the service's request ended, as the script words it.
    service: String,
}

/// One request the script sent: its report line and its hops by name.
#[derive(Debug)]
struct Request {
    head: String,
    hops: HashMap<String, Hop>,
}

impl Request {
    fn hop(&self, name: &str) -> &Hop {
        self.hops
            .get(name)
            .unwrap_or_else(|| panic!("no {name} in {self:#?}"))
    }

    /// The budget the client sent: `request N: x-request-timeout-ms: MS[, ...] -> ...`.
    fn sent(&self) -> u64 {
        let (_, rest) = self.head.split_once("x-request-timeout-ms: ").unwrap();
        let ms = rest.split([',', ' ']).next().unwrap();
        ms.parse().unwrap_or_else(|_| panic!("{}", self.head))
    }

    fn told(&self, name: &str) -> u64 {
        self.hop(name)
            .told
            .unwrap_or_else(|| panic!("{name} was never reached: {self:#?}"))
    }
}

fn parse(report: &str) -> Vec<Request> {
    let mut requests: Vec<Request> = Vec::new();
    for line in report.lines() {
        if line.starts_with("request ") {
            requests.push(Request {
                head: line.to_owned(),
                hops: HashMap::new(),
            });
            continue;
        }
        let Some(request) = requests.last_mut() else {
            continue; // the graph's addresses, before the first request
        };
        if line.trim().is_empty() || line.starts_with("logs kept") {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let after = |word: &str| {
            let at = words.iter().position(|w| *w == word)?;
            words.get(at + 1).copied()
        };
        let hop = Hop {
            forgetful: line.contains("(forgetful)"),
            told: after("told").map(|ms| ms.parse().unwrap_or_else(|_| panic!("{line}"))),
            proxy: after("proxy:")
                .unwrap_or_else(|| panic!("no proxy outcome in {line:?}"))
                .to_owned(),
            service: line
                .split_once("service: ")
                .map_or("never reached", |(_, s)| s)
                .to_owned(),
        };
        request.hops.insert(words[0].to_owned(), hop);
    }
    requests
}

fn node() -> Option<PathBuf> {
    let built = build("checkout_node", "");
    let program = skip_unless_built(&built)?;
    for tool in ["curl", "python3"] {
        if Command::new(tool).arg("--version").output().is_err() {
            let missing = format!("the example needs {tool}: apt-get install {tool}");
            skip_unless_built(&Err(missing))?;
        }
    }
    Some(program)
}

/// Every hop is told less than the service calling it, by both margins (C2).
fn shrinks_hop_by_hop(request: &Request) {
    let gateway = request.told("edge-gateway");
    let sent = request.sent();
    assert!(
        gateway + MARGIN <= sent,
        "edge-gateway was told {gateway} of {sent}: {request:#?}"
    );
    for (name, caller) in CALLERS {
        let (told, caller_told) = (request.told(name), request.told(caller));
        assert!(
            told + 2 * MARGIN <= caller_told,
            "{name} was told {told} ms, its caller {caller} {caller_told} ms: {request:#?}"
        );
    }
}

/// On reco-scorer's path every proxy recorded `outcome`, reco-scorer's `r.Context()` was
/// cancelled, and each service above it ended as `ended(service, child)` accepts.
fn path_ended(request: &Request, outcome: &str, ended: impl Fn(&str, &str) -> bool) {
    for name in RECO_PATH {
        assert_eq!(request.hop(name).proxy, outcome, "{name}: {request:#?}");
    }
    assert_eq!(
        request.hop("reco-scorer").service,
        "cancelled: r.Context() ended (context canceled)",
        "{request:#?}"
    );
    for pair in RECO_PATH.windows(2) {
        let (name, child) = (pair[0], pair[1]);
        assert!(
            ended(&request.hop(name).service, child),
            "{name}: {request:#?}"
        );
    }
}

#[test]
fn the_checkout_graph_behind_proxies_shrinks_the_budget_hop_by_hop_and_ends_it_everywhere() {
    let _module = crate::support::serial::module(module_path!());
    let Some(node) = node() else {
        return;
    };
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/proxy_checkout.sh");
    let budget = BUDGET.to_string();
    let out = Command::new("bash")
        .arg(&script)
        .args(["--forgetful", "inventory", "--requests", "2"])
        .args(["--budget", &budget, "--leave-after", "1000"])
        .arg("--hopbudget")
        .arg(env!("CARGO_BIN_EXE_hopbudget"))
        .arg("--node")
        .arg(&node)
        .output()
        .expect("bash runs the example");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{} failed: {}\n{report}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = parse(&report);
    assert_eq!(requests.len(), 4, "{report}");

    // Two requests with the whole graph answering in time: every hop answered 200 and its
    // proxy recorded `completed`; the budget shrank at every hop, below inventory too, though
    // inventory sent no deadline on its calls: its proxy's egress restated it (S13, C25).
    for request in &requests[..2] {
        assert!(request.head.ends_with("-> 200"), "{request:#?}");
        for (name, hop) in &request.hops {
            assert_eq!(hop.service, "answered 200", "{name}: {request:#?}");
            assert_eq!(hop.proxy, "completed", "{name}: {request:#?}");
        }
        assert!(request.hop("inventory").forgetful, "{request:#?}");
        shrinks_hop_by_hop(request);
    }

    // reco-scorer works 5 s: its proxy ends its request at its deadline, and Go cancels the
    // handler's r.Context() (C4). Each hop above is answered 504 by its proxy's egress and
    // answers 504 in turn, well before its own deadline (C2 leaves each caller the time to);
    // every proxy on the way records `expired`, and the client gets 504. The siblings were
    // done long before.
    let expiring = &requests[2];
    assert!(
        expiring
            .head
            .ends_with("-> 504, x-deadline-outcome: expired"),
        "{expiring:#?}"
    );
    shrinks_hop_by_hop(expiring);
    // Each hop's own deadline is only a margin later than its child's: on a loaded machine
    // its proxy may end its request before the child's 504 has climbed back (then Go cancels
    // its r.Context(), or its egress answers its call 499 first, as when a caller leaves).
    // Either way the hop ended at its deadline, and its proxy recorded `expired`.
    path_ended(expiring, "expired", |service, child| {
        *service == format!("answered 504: call to {child} answered 504 (expired)")
            || service.starts_with("cancelled: r.Context() ended")
            || *service == format!("answered 502: call to {child} answered 499 (cancelled)")
    });
    for name in ["cart-svc", "pricing", "tax-calc"] {
        assert_eq!(expiring.hop(name).service, "answered 200", "{expiring:#?}");
        assert_eq!(expiring.hop(name).proxy, "completed", "{expiring:#?}");
    }

    // The client leaves while reco-scorer works: edge-gateway's proxy sees it go and ends
    // its request; the call its egress was making for that request is dropped, so the next
    // proxy sees its caller go, and so on down (C5). Every proxy on the way records
    // `cancelled`, reco-scorer's r.Context() is cancelled. A service above it learns it from
    // its r.Context() or, when that comes first, from its egress answering its call 499
    // marked `cancelled`; none finished its work.
    let leaving = &requests[3];
    assert!(leaving.head.ends_with("-> no answer"), "{leaving:#?}");
    shrinks_hop_by_hop(leaving);
    path_ended(leaving, "cancelled", |service, child| {
        service == "cancelled: r.Context() ended (context canceled)"
            || *service == format!("answered 502: call to {child} answered 499 (cancelled)")
    });
}
