//! The inbound requests in flight, found again when the service calls out: by the trace
//! context it forwards (W3C `traceparent`, which OpenTelemetry-instrumented services propagate
//! on their own, or Zipkin's B3), or by a request id (`x-request-id`, which Envoy and Istio
//! fleets forward, or a header the operator names).
//!
//! An admitted request is registered under each of those keys for as long as its answer is
//! being sent; an outbound call carrying one of them gets that request's budget (rule C25). A
//! request id names one request and is tried first, then the trace id. Several requests in
//! flight under one key (a client reusing a `traceparent`, fan-out through one sidecar, a chain
//! that comes back through the same service) resolve to the smallest remaining budget among
//! them, never a larger one, and the ambiguity is counted (C26).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use hopbudget::RequestBudget;
use http::{HeaderMap, HeaderName};

use super::spans::IngressSpan;
use super::trace_context::{TRACEPARENT, b3_trace_id, traceparent_trace_id};

/// Envoy's and Istio's request id, read whatever `--request-id-header` names.
const X_REQUEST_ID: &str = "x-request-id";

/// Budgets of the requests in flight, by trace id and request id.
#[derive(Debug)]
pub(crate) struct Registry {
    requests: Mutex<HashMap<String, Vec<Entry>>>,
    next: AtomicU64,
    request_id: Option<HeaderName>,
}

/// One request in flight: its registration's id, its budget, and its ingress span when spans
/// are made (`--otlp-endpoint`): the parent of a call that carries no trace context.
type Entry = (u64, RequestBudget, Option<IngressSpan>);

/// The request an outbound call belongs to.
#[derive(Debug)]
pub(crate) struct Found {
    /// Its budget: what the call's own budget derives from.
    pub(crate) budget: RequestBudget,
    /// More than one request in flight carried the key the call matched by; `budget` is the
    /// tightest of them.
    pub(crate) ambiguous: bool,
    /// The ingress span of the request `budget` is from, when spans are made.
    pub(crate) ingress: Option<IngressSpan>,
}

/// Keeps a request findable; dropping it (the answer is out, or the request ended) forgets it.
#[derive(Debug)]
pub(crate) struct Registration {
    registry: Arc<Registry>,
    keys: Vec<String>,
    id: u64,
}

impl Registry {
    pub(crate) fn new(request_id: Option<HeaderName>) -> Arc<Self> {
        Arc::new(Self {
            requests: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
            request_id,
        })
    }

    /// Register an admitted request by the keys its headers carry; `None` when it has none.
    #[cfg(test)]
    pub(crate) fn register(
        self: &Arc<Self>,
        headers: &HeaderMap,
        budget: &RequestBudget,
    ) -> Option<Registration> {
        self.register_with(headers, budget, None)
    }

    /// Register an admitted request, with its ingress span when spans are made, by the keys
    /// its headers carry; `None` when it has none.
    pub(crate) fn register_with(
        self: &Arc<Self>,
        headers: &HeaderMap,
        budget: &RequestBudget,
        ingress: Option<&IngressSpan>,
    ) -> Option<Registration> {
        let keys = self.keys(headers);
        if keys.is_empty() {
            return None;
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut requests = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        for key in &keys {
            requests
                .entry(key.clone())
                .or_default()
                .push((id, budget.clone(), ingress.cloned()));
        }
        Some(Registration {
            registry: self.clone(),
            keys,
            id,
        })
    }

    /// The budget of the request an outbound call belongs to: by request id first (it names
    /// one request), then by trace id. Several requests under the first key that matches:
    /// the one with the least time left.
    pub(crate) fn find(&self, headers: &HeaderMap) -> Option<Found> {
        let requests = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        self.keys(headers).iter().find_map(|key| {
            let list = requests.get(key)?;
            let (_, budget, ingress) = list.iter().min_by_key(|(_, b, _)| b.deadline())?;
            Some(Found {
                budget: budget.clone(),
                ambiguous: list.len() > 1,
                ingress: ingress.clone(),
            })
        })
    }

    fn keys(&self, headers: &HeaderMap) -> Vec<String> {
        let mut keys = Vec::with_capacity(3);
        let mut request_id = |name: &str| {
            if let Some(value) = headers.get(name).and_then(|v| v.to_str().ok()) {
                if !value.is_empty() {
                    let key = format!("r:{value}");
                    if !keys.contains(&key) {
                        keys.push(key);
                    }
                }
            }
        };
        if let Some(name) = &self.request_id {
            request_id(name.as_str());
        }
        request_id(X_REQUEST_ID);
        // A trace id is lowercase hex in both spellings; B3's is padded to 128 bits.
        if let Some(trace) = headers
            .get(TRACEPARENT)
            .and_then(|v| v.to_str().ok())
            .and_then(traceparent_trace_id)
        {
            keys.push(format!("t:{}", trace.to_ascii_lowercase()));
        } else if let Some(trace) = b3_trace_id(headers) {
            keys.push(format!("t:{trace}"));
        }
        keys
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut requests = self
            .registry
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for key in &self.keys {
            if let Some(list) = requests.get_mut(key) {
                list.retain(|(id, _, _)| *id != self.id);
                if list.is_empty() {
                    requests.remove(key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const T1: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const T1_CHILD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01";

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (HeaderName::from_static(k), v.parse().unwrap()))
            .collect()
    }

    fn budget(ms: u64) -> RequestBudget {
        RequestBudget::local(
            Duration::from_millis(ms),
            hopbudget::Profile::default().policy(),
        )
    }

    #[test]
    fn a_call_with_the_same_trace_id_finds_the_request_until_it_ends() {
        let registry = Registry::new(None);
        let inbound = budget(800);
        let registration = registry.register(&headers(&[("traceparent", T1)]), &inbound);
        assert!(registration.is_some());
        // The service's own span id differs; the trace id is what matches.
        let found = registry.find(&headers(&[("traceparent", T1_CHILD)]));
        assert_eq!(found.map(|f| f.budget.deadline()), Some(inbound.deadline()));
        drop(registration);
        assert!(
            registry
                .find(&headers(&[("traceparent", T1_CHILD)]))
                .is_none()
        );
    }

    #[test]
    fn the_request_id_header_names_one_request_and_the_tightest_of_a_trace_wins() {
        let registry = Registry::new(Some(HeaderName::from_static("x-request-id")));
        let outer = budget(900);
        let inner = budget(300);
        let _a = registry.register(
            &headers(&[("traceparent", T1), ("x-request-id", "a")]),
            &outer,
        );
        let _b = registry.register(
            &headers(&[("traceparent", T1), ("x-request-id", "b")]),
            &inner,
        );
        let by_id = registry
            .find(&headers(&[("x-request-id", "a"), ("traceparent", T1)]))
            .unwrap();
        assert_eq!(by_id.budget.deadline(), outer.deadline());
        assert!(!by_id.ambiguous);
        let by_trace = registry.find(&headers(&[("traceparent", T1)])).unwrap();
        assert_eq!(by_trace.budget.deadline(), inner.deadline());
        assert!(
            by_trace.ambiguous,
            "two requests in flight under one trace id"
        );
    }

    #[test]
    fn under_a_shared_trace_id_the_call_gets_the_smallest_budget_whichever_came_last() {
        let registry = Registry::new(None);
        let tight = budget(200);
        let loose = budget(900);
        // The tighter request registered first: "latest wins" would hand out 900 ms.
        let _a = registry.register(&headers(&[("traceparent", T1)]), &tight);
        let _b = registry.register(&headers(&[("traceparent", T1)]), &loose);
        let found = registry
            .find(&headers(&[("traceparent", T1_CHILD)]))
            .unwrap();
        assert_eq!(found.budget.deadline(), tight.deadline());
        assert!(found.ambiguous);
    }

    #[test]
    fn b3_and_x_request_id_match_too() {
        let registry = Registry::new(None);
        let inbound = budget(500);
        let _r = registry.register(
            &headers(&[
                ("x-b3-traceid", "463ac35c9f6413ad"),
                ("x-request-id", "req-7"),
            ]),
            &inbound,
        );
        let by_b3 = registry.find(&headers(&[("b3", "463ac35c9f6413ad-0020000000000001-1")]));
        assert_eq!(by_b3.map(|f| f.budget.deadline()), Some(inbound.deadline()));
        // The same trace in W3C form (OpenTelemetry pads a 64-bit B3 id).
        let w3c = "00-0000000000000000463ac35c9f6413ad-00f067aa0ba902b7-01";
        assert!(registry.find(&headers(&[("traceparent", w3c)])).is_some());
        let by_id = registry.find(&headers(&[("x-request-id", "req-7")]));
        assert_eq!(by_id.map(|f| f.budget.deadline()), Some(inbound.deadline()));
        assert!(
            registry
                .find(&headers(&[("x-request-id", "other")]))
                .is_none()
        );
    }

    #[test]
    fn malformed_or_absent_trace_context_matches_nothing() {
        let registry = Registry::new(None);
        assert!(registry.register(&HeaderMap::new(), &budget(100)).is_none());
        assert!(
            registry
                .find(&headers(&[("traceparent", "junk")]))
                .is_none()
        );
    }
}
