//! Counters the core bumps without naming the metrics facade. The owner of a counted thing (a
//! cache, a degradation point, an outbound client) builds its key once; without feature
//! `metrics` a [`Counter`] is empty and counting is nothing at all.

#[cfg(feature = "metrics")]
use std::sync::Arc;

/// One counter series, its key built once by its owner.
#[derive(Clone, Debug)]
pub(crate) struct Counter {
    #[cfg(feature = "metrics")]
    key: Arc<metrics::Key>,
}

impl Counter {
    /// `hopbudget_degraded_total` for one degradation point.
    pub(crate) fn degraded(service: &str, route: &str, path: &str) -> Self {
        #[cfg(not(feature = "metrics"))]
        let _ = (service, route, path);
        Self {
            #[cfg(feature = "metrics")]
            key: Arc::new(super::metrics_names::degraded_key(service, route, path)),
        }
    }

    /// `hopbudget_cache_reads_total` for one cache and choice.
    pub(crate) fn cache_read(service: &str, cache: &str, choice: &'static str) -> Self {
        #[cfg(not(feature = "metrics"))]
        let _ = (service, cache, choice);
        Self {
            #[cfg(feature = "metrics")]
            key: Arc::new(super::metrics_names::cache_read_key(service, cache, choice)),
        }
    }

    /// Add one, on the current recorder.
    pub(crate) fn increment(&self) {
        #[cfg(feature = "metrics")]
        super::metrics_names::count(&self.key);
    }
}

/// Count an outbound call that no inbound request's deadline covers in
/// `hopbudget_deadline_missing_total` ([C8](crate::contract#c8)): the route is `(outbound)`,
/// since no inbound route is there to name. The client layers count their own calls made
/// outside any request; this is for a caller that decides otherwise, such as a sidecar that
/// refuses a call it cannot match to a request ([C26](crate::contract#c26)). Without the
/// `metrics` feature it does nothing.
///
/// ```
/// hopbudget::observe::outbound_missing("checkout");
/// ```
pub fn outbound_missing(service: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(
        super::DEADLINE_MISSING_TOTAL,
        "service" => service.to_owned(),
        "route" => "(outbound)"
    )
    .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = service;
}

#[cfg(all(test, feature = "prometheus"))]
mod tests {
    #[test]
    fn an_outbound_call_outside_any_request_is_counted_as_missing() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        metrics::with_local_recorder(&recorder, || super::outbound_missing("cron"));
        let text = recorder.handle().render();
        assert!(
            text.contains(
                "hopbudget_deadline_missing_total{service=\"cron\",route=\"(outbound)\"} 1"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_counter_counts_under_the_key_its_owner_built() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let counter = super::Counter::degraded("pricing", "/quote", "stale-model");
        metrics::with_local_recorder(&recorder, || {
            counter.increment();
            counter.clone().increment();
        });
        let text = recorder.handle().render();
        assert!(
            text.contains("hopbudget_degraded_total{service=\"pricing\",route=\"/quote\",path=\"stale-model\"} 2"),
            "{text}"
        );
    }
}
