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
/// since no inbound route is there to name, and `callee` is `other`. The client layers count
/// their own calls made outside any request, with the callee
/// ([`outbound_missing_to`]); this is for a caller that decides otherwise and knows no
/// destination. Without the `metrics` feature it does nothing.
///
/// ```
/// hopbudget::observe::outbound_missing("checkout");
/// ```
pub fn outbound_missing(service: &str) {
    count_outbound(service, OTHER_CALLEE);
}

/// The `callee` of an outbound call to a destination the profile does not trust, or that
/// names none.
///
/// See the example on [`outbound_missing_to`], whose second call counts under it.
pub const OTHER_CALLEE: &str = "other";

/// [`outbound_missing`] for a call to `host`: `callee` is the `trusted` pattern that covers
/// the host ([`TrustedHosts::callee_label`](crate::profile::TrustedHosts::callee_label)),
/// else `other`, so the label has no more values than the profile has patterns
/// ([C20](crate::contract#c20)). A sidecar that refuses a call it cannot match to a request
/// ([C26](crate::contract#c26)) counts it so.
///
/// ```
/// use hopbudget::Profile;
///
/// let trusted = Profile::default().trusted_hosts().clone();
/// hopbudget::observe::outbound_missing_to("checkout", &trusted, Some("orders.svc")); // callee="*.svc"
/// hopbudget::observe::outbound_missing_to("checkout", &trusted, Some("api.stripe.com")); // callee="other"
/// ```
pub fn outbound_missing_to(
    service: &str,
    trusted: &crate::profile::TrustedHosts,
    host: Option<&str>,
) {
    match host.and_then(|host| trusted.callee_label(host)) {
        Some(callee) => count_outbound(service, &callee),
        None => count_outbound(service, OTHER_CALLEE),
    }
}

fn count_outbound(service: &str, callee: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(
        super::DEADLINE_MISSING_TOTAL,
        "service" => service.to_owned(),
        "route" => "(outbound)",
        "callee" => callee.to_owned()
    )
    .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (service, callee);
}

#[cfg(all(test, feature = "prometheus"))]
mod tests {
    #[test]
    fn an_outbound_call_outside_any_request_is_counted_as_missing() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let trusted = crate::profile::Profile::default().trusted_hosts().clone();
        metrics::with_local_recorder(&recorder, || {
            super::outbound_missing("cron");
            super::outbound_missing_to("cron", &trusted, Some("api.stripe.com"));
            super::outbound_missing_to("cron", &trusted, None);
            super::outbound_missing_to("cron", &trusted, Some("orders.svc"));
            super::outbound_missing_to("cron", &trusted, Some("billing.svc"));
            super::outbound_missing_to("cron", &trusted, Some("10.0.3.7"));
        });
        let text = recorder.handle().render();
        for (callee, count) in [("other", 3), ("*.svc", 2), ("private", 1)] {
            assert!(
                text.contains(&format!(
                    "hopbudget_deadline_missing_total{{service=\"cron\",route=\"(outbound)\",callee=\"{callee}\"}} {count}"
                )),
                "{callee}: {text}"
            );
        }
        assert_eq!(
            text.matches("hopbudget_deadline_missing_total{").count(),
            3,
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
