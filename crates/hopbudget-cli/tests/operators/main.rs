//! What operators load beside the binary: the Grafana dashboard and the Prometheus rules,
//! as written, under `promtool`, and on real data scraped by a real Prometheus from proxies
//! under load. One test binary, a module per artifact.

#[path = "../support/mod.rs"]
mod support;

mod grafana_dashboard;
mod prometheus_live;
mod prometheus_rules;
