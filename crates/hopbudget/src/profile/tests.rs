//! The profile's unit tests: defaults, each section's problems named by field, and routes.

use std::time::Duration;

use super::*;
use crate::admission::QueuePolicy;
use crate::budget::HopPolicy;
use crate::codec::Carrier;
use crate::learned::LearnConfig;

fn errors(yaml: &str) -> Vec<(String, String)> {
    match Profile::from_yaml(yaml, "test.yaml") {
        Ok(_) => Vec::new(),
        Err(e) => e.issues.into_iter().map(|i| (i.field, i.reason)).collect(),
    }
}

#[test]
fn the_default_spec_is_valid_and_matches_the_contract() {
    let p = Profile::from_spec(ProfileSpec::default()).expect("default is valid");
    assert_eq!(p.edge_total(), Duration::from_secs(1));
    assert_eq!(p.policy(), HopPolicy::DEFAULT);
    assert_eq!(p.outbound_http().0, Carrier::RelativeMs);
    assert_eq!(p.http_status().expired, 504);
}

#[test]
fn the_shipped_default_file_equals_the_built_in_defaults() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../profiles/default.yaml");
    let p = Profile::load(path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        p.spec(),
        &ProfileSpec {
            service: p.service().into(),
            ..ProfileSpec::default()
        }
    );
}

#[test]
fn a_bad_trusted_host_pattern_is_named() {
    let errs = errors("outbound:\n  trusted_hosts: [loopback, 'a*b']\n");
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].0, "outbound.trusted_hosts[1]");
    assert!(errs[0].1.contains("`a*b`"), "{errs:?}");
    let p = Profile::from_yaml("outbound: {trusted_hosts: ['*.corp']}", "t").unwrap();
    assert!(p.trusted_hosts().allows("a.corp"));
    assert!(
        !p.trusted_hosts().allows("127.0.0.1"),
        "a list replaces the default"
    );
}

#[test]
fn empty_text_means_all_defaults() {
    assert!(errors("").is_empty());
    assert!(errors("# only a comment\n").is_empty());
}

#[test]
fn every_semantic_problem_is_reported_with_its_field() {
    let errs = errors(
        "service: ''\nhop_margin_ms: -5\nmax_ms: 1000\nrefuse_below_ms: 2000\n\
         status:\n  http:\n    expired: 429\n  grpc:\n    expired: RESOURCE_EXHAUSTED\n",
    );
    let fields: Vec<&str> = errs.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        fields,
        [
            "hop_margin_ms",
            "service",
            "refuse_below_ms",
            "status.http.expired",
            "status.grpc.expired"
        ],
        "{errs:?}"
    );
    assert!(errs[0].1.contains("negative"));
    assert!(errs[2].1.contains("above the maximum"));
    assert!(errs[3].1.contains("429"));
}

#[test]
fn unknown_fields_and_bad_types_name_the_path() {
    let errs = errors("hop_margn_ms: 5\n");
    assert_eq!(errs[0].0, "hop_margn_ms");
    assert!(
        errs[0].1.contains("unknown field `hop_margn_ms`"),
        "{errs:?}"
    );
    let errs = errors("status:\n  http:\n    expired: soon\n");
    assert_eq!(errs[0].0, "status.http.expired", "{errs:?}");
    let errs = errors("inbound: [grpc-timeout, smoke-signal]\n");
    assert_eq!(errs[0].0, "inbound[1]", "{errs:?}");
}

#[test]
fn routes_resolve_by_exact_path_or_prefix() {
    let p = Profile::from_yaml(
        "routes:\n  - path: /tax\n    min_budget_ms: 200\n  - path: /events/*\n    mode: stream\n",
        "t.yaml",
    )
    .unwrap();
    assert_eq!(p.min_budget("/tax"), Duration::from_millis(200));
    assert_eq!(p.min_budget("/other"), Duration::from_millis(10));
    assert!(p.is_stream("/events/orders"));
    assert!(!p.is_stream("/tax"));
}

#[test]
fn admission_resolves_limit_policy_and_route_costs() {
    assert!(
        Profile::default().admission().is_none(),
        "absent by default"
    );
    let p = Profile::from_yaml(
        "routes:\n  - path: /tax\n    min_budget_ms: 200\n\
         admission:\n  limit: 8\n  queue_bound: 32\n  policy: adaptive-lifo\n  \
         lifo_after_ms: 40\n  routes:\n    - path: /quote/*\n      cost_ms: 25\n",
        "t.yaml",
    )
    .unwrap();
    let a = p.admission().expect("configured");
    assert_eq!((a.limit(), a.queue_bound()), (8, 32));
    assert_eq!(
        a.policy(),
        QueuePolicy::AdaptiveLifo {
            after: Duration::from_millis(40)
        }
    );
    assert_eq!(a.cost_for(Some("/quote/eu")), Duration::from_millis(25));
    // Not named by admission: the route's min_budget_ms, else refuse_below_ms.
    assert_eq!(a.cost_for(Some("/tax")), Duration::from_millis(200));
    assert_eq!(a.cost_for(Some("/other")), Duration::from_millis(10));
    let defaults = Profile::from_yaml("admission: {}\n", "t.yaml").unwrap();
    let d = defaults.admission().unwrap();
    assert_eq!((d.limit(), d.queue_bound()), (64, 1024));
    assert_eq!(d.policy(), QueuePolicy::EarliestDeadlineFirst);
}

#[test]
fn admission_problems_name_their_field() {
    let errs = errors(
        "max_ms: 1000\nadmission:\n  limit: 0\n  queue_bound: -1\n  lifo_after_ms: -3\n  \
         routes:\n    - path: tax\n      cost_ms: 5000\n    - path: tax\n      cost_ms: -1\n",
    );
    let fields: Vec<&str> = errs.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        fields,
        [
            "admission.limit",
            "admission.queue_bound",
            "admission.lifo_after_ms",
            "admission.routes[0].path",
            "admission.routes[0].cost_ms",
            "admission.routes[1].path",
            "admission.routes[1].path",
            "admission.routes[1].cost_ms",
        ],
        "{errs:?}"
    );
    assert!(errs[0].1.contains("greater than zero"));
    assert!(errs[4].1.contains("above the maximum"));
    assert!(errs[6].1.contains("listed twice"));
    let errs = errors("admission:\n  policy: random\n");
    assert_eq!(errs[0].0, "admission.policy", "{errs:?}");
    let errs = errors("admission:\n  limt: 4\n");
    assert!(errs[0].1.contains("unknown field `limt`"), "{errs:?}");
}

#[test]
fn display_names_file_field_and_reason() {
    let err = Profile::from_yaml("max_ms: -1\n", "profiles/bad.yaml").unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("profiles/bad.yaml: field `max_ms`: must not be negative (got -1)"),
        "{text}"
    );
}

#[test]
fn learn_is_off_unless_a_route_asks_and_validated_field_by_field() {
    let p = Profile::from_yaml(
        concat!(
            "routes:\n",
            "  - path: /tax\n    min_budget_ms: 40\n    learn: {}\n",
            "  - path: /pay\n    learn: { quantile: p99, window_ms: 10000, min_samples: 5 }\n",
            "  - path: /other\n",
        ),
        "t.yaml",
    )
    .unwrap();
    let tax = p.route("/tax").unwrap().learned().unwrap();
    assert_eq!(tax.config(), &LearnConfig::P50);
    assert_eq!(tax.static_min(), Duration::from_millis(40));
    let pay = p.route("/pay").unwrap().learned().unwrap().config();
    assert_eq!(
        (pay.quantile, pay.window, pay.min_samples),
        (0.99, Duration::from_secs(10), 5)
    );
    assert!(p.route("/other").unwrap().learned().is_none());
    // Cold start: the static threshold.
    assert_eq!(p.min_budget("/tax"), Duration::from_millis(40));

    let errs = errors("routes:\n  - path: /c\n    learn: { windw_ms: 5 }\n");
    assert_eq!(errs[0].0, "routes[0].learn.windw_ms", "{errs:?}");
    let errs = errors(concat!(
        "routes:\n",
        "  - path: /a\n    learn: { quantile: median, window_ms: 50, min_samples: 0 }\n",
        "  - path: /b\n    learn: { quantile: p150 }\n",
    ));
    let fields: Vec<&str> = errs.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        fields,
        [
            "routes[0].learn.quantile",
            "routes[0].learn.window_ms",
            "routes[0].learn.min_samples",
            "routes[1].learn.quantile",
        ],
        "{errs:?}"
    );
    assert!(errs[0].1.contains("`median` is not a quantile"), "{errs:?}");
    assert!(errs[1].1.contains("at least 100 ms"), "{errs:?}");
}

#[tokio::test(start_paused = true)]
async fn a_learning_route_refuses_below_what_it_learned_and_clones_share_it() {
    let p = Profile::from_yaml(
        "routes:\n  - path: /tax\n    min_budget_ms: 40\n    learn: { window_ms: 8000 }\n",
        "t.yaml",
    )
    .unwrap();
    let copy = p.clone();
    for _ in 0..50 {
        copy.route("/tax")
            .unwrap()
            .learned()
            .unwrap()
            .record(Duration::from_millis(200));
    }
    tokio::time::advance(Duration::from_secs(1)).await;
    let t = p.min_budget("/tax");
    assert!(
        t >= Duration::from_millis(200) && t < Duration::from_millis(230),
        "{t:?}"
    );
}
