//! The layer that throttles every call.

use std::sync::Arc;

use tower::Layer;

use super::{AdaptiveThrottle, Throttle};
use crate::classify::BudgetErrors;

/// Client-side adaptive throttling of every call through the wrapped service (Google SRE,
/// `K = 2`): a call the throttle rejects is not sent and fails at once with
/// [`Throttled`](super::Throttled); every call that is sent is counted, accepted or not, as the classifier `C` reads its result
/// ([`BudgetErrors`] by default: an answer was accepted; a refusal, an expiry or a transport
/// failure was not; a cancelled call says nothing about the callee and is not counted).
///
/// Put it above the client layer (so it sees the callee's refusals as
/// [`BudgetError`](crate::BudgetError)s) and below any retry or hedge layer (so each attempt
/// is counted and throttled on its own). A retry policy reading [`BudgetErrors`] does not
/// retry a [`Throttled`](super::Throttled) call: the throttle already said the callee is full.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use hopbudget::throttle::{AdaptiveThrottle, ThrottleLayer, Throttled};
/// use hopbudget::{BudgetError, Refused};
/// use tower::{BoxError, Service, ServiceBuilder, ServiceExt};
///
/// // A callee that refuses two calls in three (3x overload), as a client layer reports it.
/// let mut n = 0u32;
/// let callee = tower::service_fn(move |_req: ()| {
///     n += 1;
///     let refused = n % 3 != 0;
///     async move {
///         if refused {
///             let r = Refused::new(Duration::from_millis(20), Duration::ZERO);
///             return Err::<(), BoxError>(Box::new(BudgetError::Refused(r)));
///         }
///         Ok(())
///     }
/// });
/// let throttle = Arc::new(AdaptiveThrottle::new());
/// let mut client = ServiceBuilder::new()
///     .layer(ThrottleLayer::new(throttle.clone()))
///     .service(callee);
///
/// let mut rejected_here = 0;
/// for _ in 0..300 {
///     let err = match client.ready().await.unwrap().call(()).await {
///         Ok(()) => continue,
///         Err(e) => e,
///     };
///     if err.is::<Throttled>() {
///         rejected_here += 1;
///     }
/// }
/// // A third of the calls never left: the callee sees about what it can take, twice over.
/// assert!(rejected_here > 60, "{rejected_here}");
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct ThrottleLayer<C = BudgetErrors> {
    throttle: Arc<AdaptiveThrottle>,
    classify: C,
}

impl ThrottleLayer {
    /// Throttle every call with `throttle` (share one per callee), classifying results with
    /// [`BudgetErrors`].
    ///
    /// See the [example](Self#examples).
    pub fn new(throttle: Arc<AdaptiveThrottle>) -> Self {
        Self {
            throttle,
            classify: BudgetErrors,
        }
    }
}

impl<C> ThrottleLayer<C> {
    /// Read each call's result with `classify` instead (a
    /// [`Classify`](crate::retry::Classify), as the retry policy takes), for a service whose
    /// errors or answers say "overloaded" in their own way.
    ///
    /// See the [example](Self#examples).
    pub fn classify<C2>(self, classify: C2) -> ThrottleLayer<C2> {
        ThrottleLayer {
            throttle: self.throttle,
            classify,
        }
    }

    /// The throttle this layer counts in.
    ///
    /// See the [example](Self#examples).
    pub fn throttle(&self) -> &Arc<AdaptiveThrottle> {
        &self.throttle
    }
}

impl<S, C: Clone> Layer<S> for ThrottleLayer<C> {
    type Service = Throttle<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        Throttle::new(inner, self.throttle.clone(), self.classify.clone())
    }
}
