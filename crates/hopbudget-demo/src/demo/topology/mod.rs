//! The demo's topology file: which services exist, how callers reach them, how long their own
//! work takes, how many requests each works on at once, and whom each calls.
//!
//! The file is read like an adoption profile: YAML parsed to a tree, deserialised with the
//! path of any structural error, then checked whole, so every problem is reported with the
//! file, the field and the reason (never a panic). `topologies/checkout.yaml` documents each
//! field; [`Topology::builtin`] is that file, compiled in.
//!
//! The file's sections are in `spec.rs` (re-exported here), what a whole file must satisfy in
//! `check.rs`; the text becomes a tree with the path of every error through
//! `hopbudget::config::parse_yaml`, as the adoption profile does.

mod check;
mod spec;

use std::path::Path;

use serde::{Deserialize, Serialize};

pub use spec::{
    BackgroundSpec, CallSpec, ClientSpec, DegradeSpec, FaultSpec, LatencySpec, Protocol,
    ServiceSpec,
};

/// The built-in topology: `topologies/checkout.yaml`, the seed's checkout incident (S7).
pub const CHECKOUT_YAML: &str = include_str!("../../../topologies/checkout.yaml");

/// A whole topology as written in the file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// The client.
    pub client: ClientSpec,
    /// The services; the one nobody calls is the edge (HTTP or gRPC).
    pub services: Vec<ServiceSpec>,
    #[serde(skip)]
    edge: usize,
}

pub use hopbudget::config::Issue;

/// A topology file that cannot be used: every problem, with the file and the field.
pub type TopologyError = hopbudget::config::ConfigError;

const KIND: &str = "topology";

impl Topology {
    /// The built-in checkout topology.
    pub fn builtin() -> Result<Self, TopologyError> {
        Self::from_yaml(CHECKOUT_YAML, "<built-in checkout.yaml>")
    }

    /// Load and check a topology file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, TopologyError> {
        let path = path.as_ref();
        Self::from_yaml(&hopbudget::config::read_file(KIND, path)?, path)
    }

    /// Parse and check topology text; `origin` names it in errors.
    pub fn from_yaml(text: &str, origin: impl AsRef<Path>) -> Result<Self, TopologyError> {
        let origin = origin.as_ref();
        let topo: Topology = hopbudget::config::parse_yaml(KIND, text, origin)?;
        topo.checked().map_err(|issues| TopologyError {
            kind: KIND,
            origin: origin.to_path_buf(),
            issues,
        })
    }

    /// The service facing the client.
    pub fn edge(&self) -> &ServiceSpec {
        &self.services[self.edge]
    }

    /// A service by name.
    pub fn service(&self, name: &str) -> Option<&ServiceSpec> {
        self.services.iter().find(|s| s.name == name)
    }

    /// Index of a service by name.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.services.iter().position(|s| s.name == name)
    }

    /// The caller of a service, if any.
    pub fn caller_of(&self, name: &str) -> Option<&ServiceSpec> {
        self.services
            .iter()
            .find(|s| s.calls.iter().any(|c| c.service == name))
    }

    /// Services in call order (depth first from the edge), for tables and charts.
    pub fn in_call_order(&self) -> Vec<&ServiceSpec> {
        let mut out = Vec::with_capacity(self.services.len());
        let mut stack = vec![self.edge()];
        while let Some(s) = stack.pop() {
            out.push(s);
            for c in s.calls.iter().rev() {
                if let Some(callee) = self.service(&c.service) {
                    stack.push(callee);
                }
            }
        }
        out
    }

    /// Requests per second the whole graph can serve: its slowest service's capacity (each
    /// service is visited once per request).
    pub fn capacity_per_s(&self) -> f64 {
        self.services
            .iter()
            .map(ServiceSpec::capacity_per_s)
            .fold(f64::INFINITY, f64::min)
    }

    /// The service whose capacity bounds the graph.
    pub fn bottleneck(&self) -> &ServiceSpec {
        let mut best = self.edge();
        for s in &self.services {
            if s.capacity_per_s() < best.capacity_per_s() {
                best = s;
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_is_the_seed_story() {
        let t = Topology::builtin().unwrap();
        assert_eq!(t.edge().name, "edge-gateway");
        assert_eq!(t.client.budget_ms, 500);
        assert_eq!(t.client.timeout_ms, 800);
        assert_eq!(t.edge().timeout_ms, 5_000);
        assert_eq!(
            t.service("checkout-orchestrator").unwrap().timeout_ms,
            30_000
        );
        let reco = t.service("reco-scorer").unwrap();
        assert_eq!(reco.faults[0].latency.p50_ms, 180.0);
        // It degrades rather than refuses: its minimum budget is the cheap path's cost.
        let degrade = reco.degrade.as_ref().unwrap();
        assert_eq!(degrade.path, "precomputed");
        assert!(reco.min_budget_ms < degrade.full_cost_ms);
        assert_eq!(reco.min_budget_ms as f64, degrade.latency.p99_ms);
        assert_eq!(t.bottleneck().name, "reco-scorer");
        let order: Vec<_> = t.in_call_order().iter().map(|s| s.name.clone()).collect();
        assert_eq!(
            order,
            [
                "edge-gateway",
                "checkout-orchestrator",
                "cart-svc",
                "pricing",
                "tax-calc",
                "inventory",
                "warehouse-router",
                "reco-scorer"
            ]
        );
    }

    #[test]
    fn builtin_equals_the_shipped_file() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/topologies/checkout.yaml");
        assert_eq!(Topology::load(path).unwrap(), Topology::builtin().unwrap());
    }

    #[test]
    fn lognormal_fit_hits_p50_and_p99() {
        let l = LatencySpec {
            p50_ms: 180.0,
            p99_ms: 240.0,
        };
        let (mu, sigma) = l.lognormal();
        assert!((mu.exp() - 180.0).abs() < 1e-9);
        assert!(((mu + 2.326_347_874 * sigma).exp() - 240.0).abs() < 1e-6);
    }

    #[test]
    fn every_problem_is_named_with_its_field() {
        let text = CHECKOUT_YAML
            .replace("p50_ms: 180, p99_ms: 240", "p50_ms: 180, p99_ms: 100")
            .replace("concurrency: 6\n", "concurrency: 0\n")
            .replace("- service: tax-calc", "- service: tax-calculator");
        let err = Topology::from_yaml(&text, "t.yaml").unwrap_err();
        let shown = err.to_string();
        assert!(
            shown.starts_with("invalid topology t.yaml: 4 problems"),
            "{shown}"
        );
        assert!(
            shown.contains(
                "field `services[7].faults[0].latency.p99_ms`: must be at least p50_ms 180"
            ),
            "{shown}"
        );
        assert!(
            shown.contains("field `services[7].concurrency`: must be greater than zero"),
            "{shown}"
        );
        assert!(
            shown.contains("no service is named `tax-calculator`"),
            "{shown}"
        );
        // tax-calc now has no caller, so two services face the client.
        assert!(
            shown.contains("exactly one service may face the client"),
            "{shown}"
        );
    }

    #[test]
    fn a_cheaper_path_the_hop_would_refuse_before_is_named() {
        let text = CHECKOUT_YAML
            .replace("full_cost_ms: 240", "full_cost_ms: 10")
            .replace("path: precomputed", "path: pre computed");
        let err = Topology::from_yaml(&text, "t.yaml").unwrap_err();
        let shown = err.to_string();
        assert!(
            shown.contains(
                "field `services[7].degrade.full_cost_ms`: must be above min_budget_ms 10 (got 10)"
            ),
            "{shown}"
        );
        assert!(
            shown.contains("field `services[7].degrade.path`: `pre computed` is not a path name"),
            "{shown}"
        );
    }

    #[test]
    fn a_service_name_a_url_cannot_carry_is_named() {
        let text = CHECKOUT_YAML.replace("- name: edge-gateway", "- name: edge gateway");
        let err = Topology::from_yaml(&text, "t.yaml").unwrap_err();
        let shown = err.to_string();
        assert!(
            shown.contains("field `services[0].name`: `edge gateway` is not a service name"),
            "{shown}"
        );
    }

    #[test]
    fn structural_errors_name_the_path() {
        let text = CHECKOUT_YAML.replace("concurrency: 6\n", "concurrency: six\n");
        let err = Topology::from_yaml(&text, "t.yaml").unwrap_err();
        assert_eq!(err.issues[0].field, "services[7].concurrency", "{err}");
        let text = CHECKOUT_YAML.replace("seed: 827", "seed: 827\n  sed: 1");
        let err = Topology::from_yaml(&text, "t.yaml").unwrap_err();
        assert!(err.to_string().contains("unknown field `sed`"), "{err}");
        let err = Topology::load("/nonexistent/t.yaml").unwrap_err();
        assert_eq!(err.issues[0].field, "(file)");
    }
}
