//! The call's future: the inner call's result, counted in the throttle when it comes; a call
//! dropped before its answer (its caller went away) is not counted, as it says nothing about
//! the callee.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tower::BoxError;

use super::{AdaptiveThrottle, Throttled};
use crate::classify::Classify;

pin_project! {
    /// The future [`Throttle`](super::Throttle) returns.
    ///
    /// See the [example](super::ThrottleLayer#examples).
    pub struct ThrottleFuture<F, C> {
        #[pin]
        inner: Option<F>,
        rejected: Option<Throttled>,
        counted: Option<(Arc<AdaptiveThrottle>, C)>,
    }
}

impl<F, C> ThrottleFuture<F, C> {
    pub(super) fn rejected(throttled: Throttled) -> Self {
        Self {
            inner: None,
            rejected: Some(throttled),
            counted: None,
        }
    }

    pub(super) fn sent(inner: F, throttle: Arc<AdaptiveThrottle>, classify: C) -> Self {
        Self {
            inner: Some(inner),
            rejected: None,
            counted: Some((throttle, classify)),
        }
    }
}

impl<F, C, T, E> Future for ThrottleFuture<F, C>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
    C: Classify<T, BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Some(inner) = this.inner.as_pin_mut() else {
            // Rejected before sending; `Throttled` is `Copy`, so a second poll gets it again.
            let throttled = this.rejected.unwrap_or(Throttled {
                requests: 0,
                accepts: 0,
            });
            return Poll::Ready(Err(Box::new(throttled)));
        };
        let result = std::task::ready!(inner.poll(cx)).map_err(Into::into);
        if let Some((throttle, classify)) = this.counted.take()
            && let Some(accepted) = classify.classify(&result).accepted()
        {
            throttle.record(accepted);
        }
        Poll::Ready(result)
    }
}
