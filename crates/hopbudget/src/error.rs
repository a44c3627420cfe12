//! The ways a budget stops work, as one error type, and the way a call stops before it is
//! sent: [`Throttled`], the adaptive throttle's local rejection (public as
//! [`throttle::Throttled`](crate::throttle::Throttled)). It lives here, beside the other
//! errors, because the result classification every retry, hedge and throttle shares reads it
//! (a throttled call is not retried) and sits below all three.
//!
//! Layers box these into `tower::BoxError`; callers recognise them with
//! [`BudgetError::find`], which looks through the error's source chain.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use crate::outcome::Outcome;

/// A refusal before start (rule [C3](crate::contract#c3)): the budget needed and the budget there was.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use hopbudget::{BudgetError, Outcome, Refused};
///
/// let refused = Refused::new(Duration::from_millis(200), Duration::from_millis(120));
/// assert_eq!(refused.required(), Duration::from_millis(200));
/// assert_eq!(refused.remaining(), Duration::from_millis(120));
/// assert_eq!(refused.to_string(), "refused before start: needs 200 ms, 120 ms remain");
/// assert_eq!(BudgetError::from(refused).outcome(), Outcome::Refused);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused {
    required: Duration,
    remaining: Duration,
}

impl Refused {
    /// A refusal: `required` was needed, `remaining` was available.
    ///
    /// See the [example](Self#examples).
    pub const fn new(required: Duration, remaining: Duration) -> Self {
        Self {
            required,
            remaining,
        }
    }

    /// The budget the work needs.
    ///
    /// See the [example](Self#examples).
    pub const fn required(&self) -> Duration {
        self.required
    }

    /// The budget that was available.
    ///
    /// See the [example](Self#examples).
    pub const fn remaining(&self) -> Duration {
        self.remaining
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "refused before start: needs {} ms, {} ms remain",
            self.required.as_millis(),
            self.remaining.as_millis()
        )
    }
}

impl StdError for Refused {}

/// Why work under a budget did not complete.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use hopbudget::{BudgetError, HopPolicy, Outcome, RequestBudget};
///
/// let budget = RequestBudget::local(Duration::from_millis(120), HopPolicy::DEFAULT);
/// let err = budget.admit(Duration::from_millis(200)).unwrap_err();
/// assert!(matches!(err, BudgetError::Refused(_)));
/// assert_eq!(err.outcome(), Outcome::Refused);
///
/// let stopped = budget.run(tokio::time::sleep(Duration::from_secs(1))).await;
/// assert_eq!(stopped, Err(BudgetError::Expired));
/// # }
/// ```
///
/// On the wire: `impl IntoResponse` (feature `axum`, [`http::budget_response`]),
/// `From<BudgetError> for tonic::Status` and [`BudgetError::from_grpc`] (feature `grpc`); a
/// handler hands any downstream failure on with [`DownstreamError`](crate::DownstreamError).
///
/// [`http::budget_response`]: crate::http::budget_response
/// [`BudgetError::from_grpc`]: crate::BudgetError::from_grpc
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BudgetError {
    /// Not started: too little budget (rule [C3](crate::contract#c3)).
    Refused(Refused),
    /// The budget ran out while the work was in flight (rule [C4](crate::contract#c4)).
    Expired,
    /// The caller went away while budget remained (rule [C5](crate::contract#c5)).
    Cancelled,
}

impl BudgetError {
    /// The terminal status this error stands for.
    ///
    /// See the [example](Self#examples).
    pub const fn outcome(&self) -> Outcome {
        match self {
            BudgetError::Refused(_) => Outcome::Refused,
            BudgetError::Expired => Outcome::Expired,
            BudgetError::Cancelled => Outcome::Cancelled,
        }
    }

    /// Find a `BudgetError` in an error or anywhere in its source chain: a `tower::BoxError`
    /// from the HTTP or gRPC client layers, or (feature `reqwest`) a
    /// `reqwest_middleware::Error` from [`BudgetMiddleware`](crate::http::reqwest::BudgetMiddleware),
    /// which reports its outcomes where a plain walk of the chain reaches them.
    ///
    /// ```
    /// use hopbudget::BudgetError;
    ///
    /// let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(BudgetError::Expired);
    /// assert_eq!(BudgetError::find(boxed.as_ref()), Some(&BudgetError::Expired));
    /// ```
    ///
    /// The reqwest case is shown in [`http::reqwest`](crate::http::reqwest); the runnable
    /// `examples/axum_reqwest.rs` matches on it.
    pub fn find<'a>(error: &'a (dyn StdError + 'static)) -> Option<&'a BudgetError> {
        let mut cur: Option<&(dyn StdError + 'static)> = Some(error);
        while let Some(e) = cur {
            if let Some(found) = e.downcast_ref::<BudgetError>() {
                return Some(found);
            }
            cur = e.source();
        }
        None
    }
}

impl From<Refused> for BudgetError {
    fn from(r: Refused) -> Self {
        BudgetError::Refused(r)
    }
}

impl fmt::Display for BudgetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BudgetError::Refused(r) => r.fmt(f),
            BudgetError::Expired => f.write_str("deadline expired"),
            BudgetError::Cancelled => f.write_str("cancelled: the caller went away"),
        }
    }
}

impl StdError for BudgetError {}

/// Why a budget ended early: recorded once, by whoever ends it first.
///
/// ```
/// use std::time::Duration;
/// use hopbudget::{EndCause, HopPolicy, RequestBudget};
///
/// let budget = RequestBudget::local(Duration::from_secs(1), HopPolicy::DEFAULT);
/// assert_eq!(budget.end_cause(), None);
/// budget.cancel(); // the caller went away
/// assert_eq!(budget.end_cause(), Some(EndCause::Cancelled));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EndCause {
    /// The deadline passed.
    Expired,
    /// The caller went away (or the work was cancelled) while budget remained.
    Cancelled,
}

impl From<EndCause> for BudgetError {
    fn from(c: EndCause) -> Self {
        match c {
            EndCause::Expired => BudgetError::Expired,
            EndCause::Cancelled => BudgetError::Cancelled,
        }
    }
}

impl From<EndCause> for Outcome {
    fn from(c: EndCause) -> Self {
        match c {
            EndCause::Expired => Outcome::Expired,
            EndCause::Cancelled => Outcome::Cancelled,
        }
    }
}

/// A call the adaptive throttle rejected locally: it was not sent. The callee has been
/// refusing: it accepted `accepts` of the last `requests` attempts in the window.
///
/// See the [example](crate::throttle::ThrottleLayer#examples).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Throttled {
    /// Attempts counted in the window when the call was rejected, this one included.
    pub requests: u64,
    /// How many of them the callee accepted.
    pub accepts: u64,
}

impl fmt::Display for Throttled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "not sent: the adaptive throttle rejected the call locally (the callee accepted {} of the last {} attempts)",
            self.accepts, self.requests
        )
    }
}

impl StdError for Throttled {}
