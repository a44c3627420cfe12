//! The service: ask the throttle before sending, count the answer after.

use std::sync::Arc;
use std::task::{Context, Poll};

use tower::{BoxError, Service};

use super::{AdaptiveThrottle, ThrottleFuture, Throttled};
use crate::classify::Classify;

/// The service [`ThrottleLayer`](super::ThrottleLayer) makes.
///
/// See the [example](super::ThrottleLayer#examples).
#[derive(Clone, Debug)]
pub struct Throttle<S, C> {
    inner: S,
    throttle: Arc<AdaptiveThrottle>,
    classify: C,
}

impl<S, C> Throttle<S, C> {
    pub(super) fn new(inner: S, throttle: Arc<AdaptiveThrottle>, classify: C) -> Self {
        Self {
            inner,
            throttle,
            classify,
        }
    }
}

impl<S, C, Req> Service<Req> for Throttle<S, C>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    C: Classify<S::Response, BoxError> + Clone,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ThrottleFuture<S::Future, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        if !self.throttle.try_send() {
            let (requests, accepts) = self.throttle.counts();
            return ThrottleFuture::rejected(Throttled { requests, accepts });
        }
        ThrottleFuture::sent(
            self.inner.call(req),
            self.throttle.clone(),
            self.classify.clone(),
        )
    }
}
