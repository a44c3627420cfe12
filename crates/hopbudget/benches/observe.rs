//! Cost of a hop's instrumentation (rule C14): `Hop::start` + `finish` with nothing
//! installed, against creating the `RequestBudget` alone, and with a subscriber and a
//! recorder installed.
//!
//! Run with `cargo bench -p hopbudget --all-features --bench observe`; with
//! `--features http` instead, the `metrics` feature is off and the hop records only its span,
//! which shows what the metrics cost with no recorder installed. Modules run in name
//! order; the "nothing installed" case runs before any subscriber has existed in the
//! process, as in a service that never installs one (a scoped subscriber, once seen, makes
//! every later span check the thread's dispatcher).

use std::hint::black_box;
use std::time::Duration;

use hopbudget::codec::Carrier;
use hopbudget::observe::{Hop, HopLabels, Protocol};
use hopbudget::{HopPolicy, Outcome, RequestBudget};

fn main() {
    divan::main();
}

fn budget() -> RequestBudget {
    RequestBudget::from_carrier(
        Carrier::RelativeMs,
        black_box(Duration::from_millis(250)),
        HopPolicy::DEFAULT,
    )
}

fn labels() -> HopLabels {
    HopLabels::new("tax", "/tax/{id}", Protocol::Http)
}

/// The HTTP server layer around a handler that answers at once, and a request carrying a
/// relative-ms budget; each iteration runs one request to completion on a current-thread
/// runtime.
mod server {
    use std::convert::Infallible;

    use bytes::Bytes;
    use hopbudget::Profile;
    use hopbudget::http::server::ServerBudgetLayer;
    use http::{Request, Response};
    use http_body_util::Full;
    use tower::{Layer, Service, ServiceExt, service_fn};

    pub(crate) fn run(b: divan::Bencher) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let profile = Profile::from_yaml("service: tax", "bench").unwrap();
        let svc =
            ServerBudgetLayer::new(profile).layer(service_fn(|_req: Request<Full<Bytes>>| async {
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
            }));
        b.bench_local(|| {
            let req = Request::get("/tax")
                .header("x-request-timeout-ms", "250")
                .body(Full::new(Bytes::new()))
                .unwrap();
            let mut svc = svc.clone();
            rt.block_on(async move { svc.ready().await.unwrap().call(req).await.unwrap() })
        });
    }
}

fn hop(labels: &HopLabels) {
    let budget = budget();
    let hop = Hop::start(labels, &budget);
    hop.finish(black_box(Outcome::Completed));
}

mod a_baseline {
    use super::*;

    /// What a server layer does without instrumentation: read the budget into a
    /// `RequestBudget` (and drop it, as the hop benchmarks do).
    #[divan::bench(sample_size = 1000)]
    fn create_request_budget(b: divan::Bencher) {
        b.bench_local(|| drop(black_box(budget())));
    }
}

mod b_nothing_installed {
    use super::*;

    /// Budget plus hop with no subscriber and no recorder: the cost to keep under 5%.
    #[divan::bench(sample_size = 1000)]
    fn budget_and_hop(b: divan::Bencher) {
        let labels = labels();
        b.bench_local(|| hop(black_box(&labels)));
    }

    /// The HTTP server layer (which opens a hop per request), nothing installed.
    #[divan::bench(sample_size = 1000)]
    fn server_layer_request(b: divan::Bencher) {
        super::server::run(b);
    }

    /// The same with labels from `HopLabels::for_route` per request (borrowed route).
    #[divan::bench(sample_size = 1000)]
    fn budget_and_hop_for_route(b: divan::Bencher) {
        let service: std::sync::Arc<str> = "tax".into();
        let route = String::from("/tax/{id}");
        b.bench_local(|| {
            hop(&HopLabels::for_route(
                black_box(&service),
                black_box(&route),
                Protocol::Http,
            ))
        });
    }

    /// The same with labels built per request instead of once per route.
    #[divan::bench(sample_size = 1000)]
    fn budget_and_hop_fresh_labels(b: divan::Bencher) {
        b.bench_local(|| hop(&labels()));
    }
}

#[cfg(all(feature = "metrics", feature = "prometheus", feature = "otlp"))]
mod c_installed {
    use super::*;
    use hopbudget::observe::otlp::{FileSpanExporter, OtlpFile};
    use tracing_subscriber::layer::SubscriberExt;

    fn recorder() -> metrics_exporter_prometheus::PrometheusRecorder {
        hopbudget::observe::prometheus::builder()
            .unwrap()
            .build_recorder()
    }

    /// The HTTP server layer with a Prometheus recorder and an OTLP file subscriber.
    #[divan::bench(sample_size = 1000)]
    fn server_layer_request_recorder_and_otlp_subscriber(b: divan::Bencher) {
        let recorder = recorder();
        let otlp = OtlpFile::with_exporter(FileSpanExporter::append("/dev/null").unwrap(), "bench");
        let _g =
            tracing::subscriber::set_default(tracing_subscriber::registry().with(otlp.layer()));
        metrics::with_local_recorder(&recorder, || super::server::run(b));
    }

    /// Prometheus recorder only.
    #[divan::bench(sample_size = 1000)]
    fn recorder_only(b: divan::Bencher) {
        let labels = labels();
        let recorder = recorder();
        metrics::with_local_recorder(&recorder, || b.bench_local(|| hop(black_box(&labels))));
    }

    /// A bare `tracing` registry only (spans created, nothing exported).
    #[divan::bench(sample_size = 1000)]
    fn registry_only(b: divan::Bencher) {
        let labels = labels();
        let _g = tracing::subscriber::set_default(tracing_subscriber::registry());
        b.bench_local(|| hop(black_box(&labels)));
    }

    /// Prometheus recorder plus tracing-opentelemetry exporting OTLP JSON (to /dev/null, in
    /// the background batch thread).
    #[divan::bench(sample_size = 1000)]
    fn recorder_and_otlp_subscriber(b: divan::Bencher) {
        let labels = labels();
        let recorder = recorder();
        let otlp = OtlpFile::with_exporter(FileSpanExporter::append("/dev/null").unwrap(), "bench");
        let _g =
            tracing::subscriber::set_default(tracing_subscriber::registry().with(otlp.layer()));
        metrics::with_local_recorder(&recorder, || b.bench_local(|| hop(black_box(&labels))));
    }
}
