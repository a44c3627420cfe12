//! Metric handles are held, not looked up (#51, C14, C20): through the real server layer
//! around an axum router, each series (service, route, outcome) is registered with the
//! recorder once, however many requests it counts, and no two series share a handle.
//!
//! The recorder here counts its own `register_*` calls per series; it is a thread's local
//! recorder, so the test runs every request on the test's own thread.
#![cfg(all(feature = "axum", feature = "metrics"))]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::routing::get;
use hopbudget::Profile;
use hopbudget::http::server::ServerBudgetLayer;
use http_body_util::BodyExt;
use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use tower::ServiceExt;

/// One series: how often the recorder was asked for its handle, and what was recorded on it.
#[derive(Default)]
struct Series {
    registered: AtomicU64,
    value: Arc<AtomicU64>,
}

/// A histogram that counts its samples, enough to tell one series from another.
struct Samples(Arc<AtomicU64>);

impl HistogramFn for Samples {
    fn record(&self, _value: f64) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// Counts `register_*` calls per series, named `name{label=value,...}`.
#[derive(Default)]
struct Registrations {
    series: Mutex<BTreeMap<String, Arc<Series>>>,
}

impl Registrations {
    fn series(&self, key: &Key) -> Arc<Series> {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        let series = self.series.lock().unwrap().entry(name).or_default().clone();
        series.registered.fetch_add(1, Ordering::Relaxed);
        series
    }

    /// Every series: (name, registrations, value).
    fn snapshot(&self) -> Vec<(String, u64, u64)> {
        self.series
            .lock()
            .unwrap()
            .iter()
            .map(|(name, s)| {
                (
                    name.clone(),
                    s.registered.load(Ordering::Relaxed),
                    s.value.load(Ordering::Relaxed),
                )
            })
            .collect()
    }

    fn value(&self, name: &str) -> u64 {
        self.snapshot()
            .into_iter()
            .find(|(n, _, _)| n == name)
            .map_or(0, |(_, _, v)| v)
    }
}

impl Recorder for Registrations {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.series(key).value.clone())
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(Arc::new(Samples(self.series(key).value.clone())))
    }
}

async fn get_with(app: &Router, path: &str, budget_ms: &str) -> u16 {
    let req = http::Request::get(path)
        .header("x-request-timeout-ms", budget_ms)
        .body(axum::body::Body::empty())
        .unwrap();
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status().as_u16();
    // The hop ends once its answer has gone out in full.
    res.into_body().collect().await.unwrap();
    status
}

#[tokio::test(flavor = "current_thread")]
async fn each_series_is_registered_once_and_keeps_its_own_handle() {
    let recorder = Registrations::default();
    let _local = metrics::set_default_local_recorder(&recorder);
    let profile = Profile::from_yaml("service: held", "test-profile").unwrap();
    let app = Router::new()
        .route("/a/{id}", get(|| async { "a" }))
        .route("/b", get(|| async { "b" }))
        .layer(ServerBudgetLayer::new(profile));

    for i in 0..5 {
        assert_eq!(get_with(&app, &format!("/a/{i}"), "500").await, 200);
    }
    for _ in 0..3 {
        assert_eq!(get_with(&app, "/b", "500").await, 200);
    }
    // Below the 10 ms refuse threshold: refused before work (C3), its own series.
    for _ in 0..2 {
        assert_eq!(get_with(&app, "/a/9", "1").await, 503);
    }

    let all = recorder.snapshot();
    // One handle per label set, whatever the number of requests it counted.
    for (name, registered, _) in &all {
        assert_eq!(
            *registered, 1,
            "{name} looked up {registered} times: {all:#?}"
        );
    }
    // Each label set counts its own requests, and only them: no two share a handle.
    let hops = |route: &str, outcome: &str| {
        recorder.value(&format!(
            "hopbudget_hops_total{{service=held,route={route},outcome={outcome}}}"
        ))
    };
    assert_eq!(hops("/a/{id}", "completed"), 5, "{all:#?}");
    assert_eq!(hops("/a/{id}", "refused"), 2, "{all:#?}");
    assert_eq!(hops("/b", "completed"), 3, "{all:#?}");
    assert_eq!(hops("/b", "refused"), 0, "{all:#?}");
    let arrivals = |route: &str| {
        recorder.value(&format!(
            "hopbudget_arrivals_total{{service=held,route={route}}}"
        ))
    };
    assert_eq!((arrivals("/a/{id}"), arrivals("/b")), (7, 3), "{all:#?}");
    assert_eq!(
        recorder.value("hopbudget_refused_before_work_total{service=held,route=/a/{id}}"),
        2,
        "{all:#?}"
    );
    assert_eq!(
        recorder.value("hopbudget_remaining_at_arrival_ms{service=held,route=/b}"),
        3,
        "{all:#?}"
    );
}
