//! Connections to the service bounded in total (#46 item 3, C27). An HTTP/1.1 caller has
//! one connection to the service, its own (see `paired`), so `--max-connections` bounds
//! those. HTTP/2 callers' streams to an HTTP/1.1 service each take a pooled connection, since
//! HTTP/1.1 carries one request at a time: one caller connection could open `--max-streams`
//! of them, and a few such callers could use up the file descriptors the proxy left for its
//! own callers. `--upstream-max-connections` bounds those pooled calls together; a request
//! past it waits for one to end, inside its budget, so a request that cannot get one in time
//! is answered 504 as any other that runs out of time (C4). A connection is held until the
//! service's answer has been read to its end, when the pool may take it back.
//!
//! gRPC and h2c calls share one HTTP/2 connection to the service and are not counted here.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Pooled HTTP/1.1 calls to the service past the limit, which then waited for one to end.
pub(crate) const LIMIT_REACHED_TOTAL: &str = "hopbudget_proxy_upstream_limit_reached_total";

/// The pooled HTTP/1.1 calls to the service that may be open at once.
#[derive(Clone, Debug)]
pub(crate) struct UpstreamLimit(Arc<Semaphore>);

/// A pooled call's place under the limit: in the service's answer's extensions, and then
/// kept with its body until that ends. (Extensions must be `Clone`; a clone holds the same
/// place.)
#[derive(Clone, Debug)]
pub(crate) struct Held {
    _place: Option<Arc<OwnedSemaphorePermit>>,
}

impl UpstreamLimit {
    pub(crate) fn new(max: usize) -> Self {
        Self(Arc::new(Semaphore::new(max.max(1))))
    }

    /// A place for one call, waiting for one to end when there is none.
    pub(crate) async fn hold(&self) -> Held {
        if let Ok(place) = self.0.clone().try_acquire_owned() {
            return Held {
                _place: Some(Arc::new(place)),
            };
        }
        metrics::counter!(LIMIT_REACHED_TOTAL).increment(1);
        // The semaphore is never closed, so this is always a place.
        Held {
            _place: self.0.clone().acquire_owned().await.ok().map(Arc::new),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_call_past_the_limit_waits_until_a_place_is_given_back() {
        let limit = UpstreamLimit::new(2);
        let (a, _b) = (limit.hold().await, limit.hold().await);
        let third = tokio::spawn({
            let limit = limit.clone();
            async move { limit.hold().await }
        });
        tokio::task::yield_now().await;
        assert!(!third.is_finished(), "no place while two are held");
        drop(a);
        third.await.unwrap();
    }
}
