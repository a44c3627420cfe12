//! What a whole topology must satisfy beyond its types: every problem found is named with
//! its field, so one run reports them all.

use std::collections::HashMap;

use super::{Issue, LatencySpec, Topology};

impl Topology {
    /// The topology with its edge found, or every problem with it.
    pub(super) fn checked(mut self) -> Result<Self, Vec<Issue>> {
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
