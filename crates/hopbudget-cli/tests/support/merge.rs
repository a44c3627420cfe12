//! What `audit --merge` must keep: the parts of a report that merging instances' reports
//! reproduces exactly.

use serde_json::Value;

/// What a merged report must share with one audit of the same spans: every finding (but
/// the trace it names as an example, the first instance's), the rollout map, the per-hop,
/// per-service and per-edge tables, the hop tree, chain depth and the span and trace counts.
pub(crate) fn comparable(report: &Value) -> Value {
    let mut findings = report["findings"].clone();
    for f in findings.as_array_mut().unwrap() {
        f.as_object_mut().unwrap().remove("example_trace");
    }
    serde_json::json!({
        "findings": findings,
        "rollout": report["rollout"],
        "services": report["services"],
        "timing_edges": report["timing_edges"],
        "chain_depth": report["chain_depth"],
        "hops": report["hops"],
        "depths": report["depths"],
        "roots": report["roots"],
        "tree": report["tree"],
        "traces": report["traces"],
        "spans": report["input"]["spans"],
        "nothing_to_judge": report["nothing_to_judge"],
    })
}
