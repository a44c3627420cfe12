//! The inbound requests in flight, found again when the service calls out: by the W3C trace
//! context it forwards (`traceparent`, which OpenTelemetry-instrumented services propagate on
//! their own), or by a request-id header the operator names.
//!
//! An admitted request is registered under its trace id (and request id) for as long as its
//! answer is being sent; an outbound call carrying the same trace id gets that request's
//! budget (rule C25). Several requests in flight under one trace id (a chain that comes back
//! through the same service) resolve to the latest, the innermost hop of the chain.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use hopbudget::RequestBudget;
use http::{HeaderMap, HeaderName};

/// W3C Trace Context's header.
const TRACEPARENT: &str = "traceparent";

/// Budgets of the requests in flight, by trace id and request id.
#[derive(Debug)]
pub(crate) struct Registry {
    requests: Mutex<HashMap<String, Vec<(u64, RequestBudget)>>>,
    next: AtomicU64,
    request_id: Option<HeaderName>,
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
    pub(crate) fn register(
        self: &Arc<Self>,
        headers: &HeaderMap,
        budget: &RequestBudget,
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
                .push((id, budget.clone()));
        }
        Some(Registration {
            registry: self.clone(),
            keys,
            id,
        })
    }

    /// The budget of the request an outbound call belongs to: by request id first (it names
    /// one request), then by trace id.
    pub(crate) fn find(&self, headers: &HeaderMap) -> Option<RequestBudget> {
        let requests = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        self.keys(headers)
            .iter()
            .find_map(|key| requests.get(key)?.last().map(|(_, b)| b.clone()))
    }

    fn keys(&self, headers: &HeaderMap) -> Vec<String> {
        let mut keys = Vec::with_capacity(2);
        if let Some(name) = &self.request_id {
            if let Some(value) = headers.get(name).and_then(|v| v.to_str().ok()) {
                if !value.is_empty() {
                    keys.push(format!("r:{value}"));
                }
            }
        }
        if let Some(trace) = headers
            .get(TRACEPARENT)
            .and_then(|v| v.to_str().ok())
            .and_then(trace_id)
        {
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
                list.retain(|(id, _)| *id != self.id);
                if list.is_empty() {
                    requests.remove(key);
                }
            }
        }
    }
}

/// The trace id of a `traceparent` value (`00-<32 hex>-<16 hex>-<2 hex>`), or `None` for a
/// value that is not one: version `ff`, an all-zero id, wrong lengths or characters.
fn trace_id(value: &str) -> Option<&str> {
    let mut parts = value.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    let valid = hex(version, 2)
        && version != "ff"
        && hex(trace, 32)
        && trace.bytes().any(|b| b != b'0')
        && hex(span, 16)
        && hex(flags, 2);
    valid.then_some(trace)
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
        assert_eq!(found.map(|b| b.deadline()), Some(inbound.deadline()));
        drop(registration);
        assert!(
            registry
                .find(&headers(&[("traceparent", T1_CHILD)]))
                .is_none()
        );
    }

    #[test]
    fn the_request_id_header_names_one_request_and_the_latest_of_a_trace_wins() {
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
        let by_id = registry.find(&headers(&[("x-request-id", "a"), ("traceparent", T1)]));
        assert_eq!(by_id.map(|b| b.deadline()), Some(outer.deadline()));
        let by_trace = registry.find(&headers(&[("traceparent", T1)]));
        assert_eq!(by_trace.map(|b| b.deadline()), Some(inner.deadline()));
    }

    #[test]
    fn malformed_or_absent_trace_context_matches_nothing() {
        assert_eq!(trace_id(T1), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        ] {
            assert_eq!(trace_id(bad), None, "{bad}");
        }
        let registry = Registry::new(None);
        assert!(registry.register(&HeaderMap::new(), &budget(100)).is_none());
        assert!(
            registry
                .find(&headers(&[("traceparent", "junk")]))
                .is_none()
        );
    }
}
