//! The demo's topology file: which services exist, how callers reach them, how long their own
//! work takes, how many requests each works on at once, and whom each calls.
//!
//! The file is read like an adoption profile: YAML parsed to a tree, deserialised with the
//! path of any structural error, then checked whole, so every problem is reported with the
//! file, the field and the reason (never a panic). `topologies/checkout.yaml` documents each
//! field; [`Topology::builtin`] is that file, compiled in.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The built-in topology: `topologies/checkout.yaml`, the seed's checkout incident (S7).
pub const CHECKOUT_YAML: &str = include_str!("../../topologies/checkout.yaml");

/// The client side of the demo: budget, timeout and the open-loop arrival schedule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientSpec {
    /// The user's whole budget, in ms.
    pub budget_ms: u64,
    /// When the client gives up, in ms.
    pub timeout_ms: u64,
    /// Arrivals per second (open loop, Poisson).
    pub rate_per_s: f64,
    /// Seconds of arrivals per mode.
    pub duration_s: f64,
    /// Seed of the arrival schedule and of every sampled latency.
    pub seed: u64,
}

/// A latency as its p50 and p99.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencySpec {
    /// Median, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
}

impl LatencySpec {
    /// The log-normal's `mu` and `sigma` fitted to p50 and p99.
    pub fn lognormal(&self) -> (f64, f64) {
        // p99 of a standard normal.
        const Z99: f64 = 2.326_347_874;
        let mu = self.p50_ms.ln();
        let sigma = ((self.p99_ms.ln() - mu) / Z99).max(0.0);
        (mu, sigma)
    }

    /// Mean of the fitted log-normal, ms.
    pub fn mean_ms(&self) -> f64 {
        let (mu, sigma) = self.lognormal();
        (mu + sigma * sigma / 2.0).exp()
    }
}

/// A fault: a different latency on a share of requests.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    /// A name for reports (`stale-model`).
    pub name: String,
    /// Share of requests that take the fault's latency, 0 to 1.
    pub rate: f64,
    /// The latency on the fault's path.
    pub latency: LatencySpec,
}

/// A cheaper path a service takes when the budget left cannot pay for its full work
/// (`hopbudget::degrade::Degrade`). Only a hop that knows its budget can choose it, so only
/// `propagated` mode degrades; without a budget the full path always runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DegradeSpec {
    /// The cheaper path's name (`precomputed`): the `path` label of `hopbudget_degraded_total`.
    pub path: String,
    /// What the full path is taken to cost, ms: with less budget left than this when its work
    /// would start, the hop takes the cheaper path.
    pub full_cost_ms: u64,
    /// The cheaper path's own work.
    pub latency: LatencySpec,
}

impl DegradeSpec {
    /// What the full path is taken to cost.
    pub fn full_cost(&self) -> Duration {
        Duration::from_millis(self.full_cost_ms)
    }
}

/// Background work a service hands over a queue after answering (S11): it runs under its own
/// deadline, rooted when it is scheduled, and is not cancelled when the response goes out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackgroundSpec {
    /// A name for reports (`order-confirmation-email`).
    pub name: String,
    /// The work's latency.
    pub latency: LatencySpec,
    /// Its own deadline, from the moment it is scheduled.
    pub deadline_ms: u64,
    /// Workers consuming the queue.
    #[serde(default = "one")]
    pub workers: u32,
}

fn one() -> u32 {
    1
}

/// How callers reach a service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// `POST /call` over HTTP.
    Http,
    /// `hopbudget.demo.Hop/Call` over gRPC.
    Grpc,
}

impl Protocol {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Grpc => "grpc",
        }
    }
}

/// One downstream call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallSpec {
    /// The callee's name.
    pub service: String,
    /// A failed optional call degrades the answer instead of failing it.
    #[serde(default)]
    pub optional: bool,
}

/// One service.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceSpec {
    /// Unique name.
    pub name: String,
    /// How callers reach it.
    pub protocol: Protocol,
    /// Its own work per request.
    pub latency: LatencySpec,
    /// Requests doing their own work at once; the rest queue.
    pub concurrency: u32,
    /// `timeouts` mode: the fresh timeout on each call it makes and on its own work.
    pub timeout_ms: u64,
    /// `propagated` mode: the least remaining budget it starts work with.
    #[serde(default)]
    pub min_budget_ms: u64,
    /// Where `hopbudget serve` listens and peers connect.
    #[serde(default)]
    pub addr: Option<SocketAddr>,
    /// Downstream calls, made in parallel after its own work.
    #[serde(default)]
    pub calls: Vec<CallSpec>,
    /// Faults.
    #[serde(default)]
    pub faults: Vec<FaultSpec>,
    /// Background work handed over a queue after a successful answer (S11).
    #[serde(default)]
    pub background: Option<BackgroundSpec>,
    /// A cheaper path taken when the budget cannot pay for the full one.
    #[serde(default)]
    pub degrade: Option<DegradeSpec>,
}

impl ServiceSpec {
    /// Mean work time per request, faults included, ms.
    pub fn mean_work_ms(&self) -> f64 {
        let fault_share: f64 = self.faults.iter().map(|f| f.rate).sum::<f64>().min(1.0);
        let faulty: f64 = self
            .faults
            .iter()
            .map(|f| f.rate * f.latency.mean_ms())
            .sum();
        (1.0 - fault_share) * self.latency.mean_ms() + faulty
    }

    /// Requests per second this service can do its own work for.
    pub fn capacity_per_s(&self) -> f64 {
        f64::from(self.concurrency) * 1000.0 / self.mean_work_ms().max(0.001)
    }

    /// The `timeouts`-mode timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// The `propagated`-mode minimum budget.
    pub fn min_budget(&self) -> Duration {
        Duration::from_millis(self.min_budget_ms)
    }
}

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
        Self::from_yaml(&hopbudget::__private::read_file(KIND, path)?, path)
    }

    /// Parse and check topology text; `origin` names it in errors.
    pub fn from_yaml(text: &str, origin: impl AsRef<Path>) -> Result<Self, TopologyError> {
        let origin = origin.as_ref();
        let topo: Topology = hopbudget::__private::parse_yaml(KIND, text, origin)?;
        topo.checked().map_err(|issues| TopologyError {
            kind: KIND,
            origin: origin.to_path_buf(),
            issues,
        })
    }

    fn checked(mut self) -> Result<Self, Vec<Issue>> {
        let mut issues = Vec::new();
        let mut issue = |field: String, reason: String| issues.push(Issue { field, reason });
        let c = &self.client;
        if c.budget_ms == 0 {
            issue(
                "client.budget_ms".into(),
                "must be greater than zero".into(),
            );
        }
        if c.timeout_ms == 0 {
            issue(
                "client.timeout_ms".into(),
                "must be greater than zero".into(),
            );
        }
        if !(c.rate_per_s.is_finite() && c.rate_per_s > 0.0 && c.rate_per_s <= 10_000.0) {
            issue(
                "client.rate_per_s".into(),
                format!("must be above 0 and at most 10000 (got {})", c.rate_per_s),
            );
        }
        if !(c.duration_s.is_finite() && c.duration_s > 0.0 && c.duration_s <= 3_600.0) {
            issue(
                "client.duration_s".into(),
                format!("must be above 0 and at most 3600 (got {})", c.duration_s),
            );
        }
        if self.services.is_empty() {
            issue("services".into(), "at least one service is needed".into());
        }
        let mut index = HashMap::new();
        for (i, s) in self.services.iter().enumerate() {
            let at = format!("services[{i}]");
            if !is_plain_name(&s.name) {
                issue(
                    format!("{at}.name"),
                    format!(
                        "`{}` is not a service name (letters, digits, `-`, `_`)",
                        s.name
                    ),
                );
            }
            if index.insert(s.name.as_str(), i).is_some() {
                issue(format!("{at}.name"), format!("`{}` is named twice", s.name));
            }
            check_latency(&mut issue, &format!("{at}.latency"), &s.latency);
            if s.concurrency == 0 {
                issue(
                    format!("{at}.concurrency"),
                    "must be greater than zero".into(),
                );
            }
            if s.timeout_ms == 0 {
                issue(
                    format!("{at}.timeout_ms"),
                    "must be greater than zero".into(),
                );
            }
            let mut share = 0.0;
            for (j, f) in s.faults.iter().enumerate() {
                let fat = format!("{at}.faults[{j}]");
                if !(0.0..=1.0).contains(&f.rate) {
                    issue(
                        format!("{fat}.rate"),
                        format!("must be between 0 and 1 (got {})", f.rate),
                    );
                }
                share += f.rate;
                check_latency(&mut issue, &format!("{fat}.latency"), &f.latency);
            }
            if let Some(b) = &s.background {
                check_latency(&mut issue, &format!("{at}.background.latency"), &b.latency);
                if b.deadline_ms == 0 {
                    issue(
                        format!("{at}.background.deadline_ms"),
                        "must be greater than zero".into(),
                    );
                }
                if b.workers == 0 {
                    issue(
                        format!("{at}.background.workers"),
                        "must be greater than zero".into(),
                    );
                }
            }
            if let Some(d) = &s.degrade {
                let dat = format!("{at}.degrade");
                check_latency(&mut issue, &format!("{dat}.latency"), &d.latency);
                if !is_plain_name(&d.path) {
                    issue(
                        format!("{dat}.path"),
                        format!(
                            "`{}` is not a path name (letters, digits, `-`, `_`)",
                            d.path
                        ),
                    );
                }
                if s.min_budget_ms >= d.full_cost_ms {
                    issue(
                        format!("{dat}.full_cost_ms"),
                        format!(
                            "must be above min_budget_ms {} (got {}): the hop would refuse \
                             before it could degrade",
                            s.min_budget_ms, d.full_cost_ms
                        ),
                    );
                }
            }
            if share > 1.0 + 1e-9 {
                issue(
                    format!("{at}.faults"),
                    format!("rates add up to {share}, more than 1"),
                );
            }
        }
        let mut called = vec![false; self.services.len()];
        for (i, s) in self.services.iter().enumerate() {
            for (j, call) in s.calls.iter().enumerate() {
                match index.get(call.service.as_str()) {
                    None => issue(
                        format!("services[{i}].calls[{j}].service"),
                        format!("no service is named `{}`", call.service),
                    ),
                    Some(&k) if k == i => issue(
                        format!("services[{i}].calls[{j}].service"),
                        format!("`{}` calls itself", s.name),
                    ),
                    Some(&k) => {
                        if called[k] {
                            issue(
                                format!("services[{i}].calls[{j}].service"),
                                format!(
                                    "`{}` already has a caller: the graph must be a tree",
                                    call.service
                                ),
                            );
                        }
                        called[k] = true;
                    }
                }
            }
        }
        let roots: Vec<usize> = (0..self.services.len()).filter(|&i| !called[i]).collect();
        match roots.as_slice() {
            [edge] => self.edge = *edge,
            [] if !self.services.is_empty() => issue(
                "services".into(),
                "every service has a caller: the graph has a cycle and no edge service".into(),
            ),
            [] => {}
            many => issue(
                "services".into(),
                format!(
                    "exactly one service may face the client (have no caller); found {}: {}",
                    many.len(),
                    many.iter()
                        .map(|&i| self.services[i].name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ),
        }
        if issues.is_empty() {
            Ok(self)
        } else {
            Err(issues)
        }
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

fn check_latency(issue: &mut impl FnMut(String, String), at: &str, l: &LatencySpec) {
    if !(l.p50_ms.is_finite() && l.p50_ms > 0.0) {
        issue(
            format!("{at}.p50_ms"),
            format!("must be above 0 (got {})", l.p50_ms),
        );
    }
    if !(l.p99_ms.is_finite() && l.p99_ms >= l.p50_ms) {
        issue(
            format!("{at}.p99_ms"),
            format!("must be at least p50_ms {} (got {})", l.p50_ms, l.p99_ms),
        );
    }
    if l.p99_ms > 600_000.0 {
        issue(
            format!("{at}.p99_ms"),
            format!("must be at most 600000 (got {})", l.p99_ms),
        );
    }
}

/// A service or path name the demo can put in a URL and a metric label unescaped: not empty,
/// only ASCII letters, digits, `-` and `_`.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_')
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
