//! Cost of a hop's instrumentation (rule C14): `Hop::start` + `finish` with nothing
//! installed, against creating the `RequestBudget` alone, and with a subscriber and a
//! recorder installed.
//!
//! Run with `cargo bench -p hopbudget --all-features --bench observe`. Modules run in name
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

    /// The same with labels built per request instead of once per route.
    #[divan::bench(sample_size = 1000)]
    fn budget_and_hop_fresh_labels(b: divan::Bencher) {
        b.bench_local(|| hop(&labels()));
    }
}

mod c_installed {
    use super::*;
    use hopbudget::observe::otlp::{FileSpanExporter, OtlpFile};
    use tracing_subscriber::layer::SubscriberExt;

    fn recorder() -> metrics_exporter_prometheus::PrometheusRecorder {
        hopbudget::observe::prometheus::builder()
            .unwrap()
            .build_recorder()
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
