//! What one attempt's result amounted to ([`Attempt`]), and the classifiers that decide it
//! ([`Classify`], [`BudgetErrors`]).
//!
//! The retry policy ([`DeadlineRetry`](crate::retry::DeadlineRetry)), the adaptive throttle
//! ([`ThrottleLayer`](crate::throttle::ThrottleLayer)) and the hedge all read results the same
//! way, so the reading lives here, below all three: none of them imports another for it. The
//! public names are re-exported from [`retry`](crate::retry), where users reach them.

use std::time::Duration;

use crate::error::{BudgetError, Throttled};

/// What one attempt amounted to, for the retry decision.
///
/// See the [example](crate::retry::DeadlineRetry#examples).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// It worked (or failed in a way no retry can fix).
    Done,
    /// The callee refused before start; it may say what it needed.
    Refused {
        /// The budget the callee said it needs, if it said.
        required: Option<Duration>,
    },
    /// The budget ran out. Never retried.
    Expired,
    /// The caller went away. Never retried.
    Cancelled,
    /// A failure a retry might fix (connection reset, 502, UNAVAILABLE...).
    Retryable,
}

impl Attempt {
    /// Whether the callee accepted the attempt, for [`AdaptiveThrottle::record`](crate::throttle::AdaptiveThrottle::record): an answer
    /// was accepted; a refusal, a retryable failure and an expiry (an overloaded callee looks
    /// like this too) were not; a cancelled attempt says nothing about the callee (`None`).
    ///
    /// See the [example](crate::retry::DeadlineRetry#examples).
    pub fn accepted(self) -> Option<bool> {
        match self {
            Attempt::Done => Some(true),
            Attempt::Refused { .. } | Attempt::Expired | Attempt::Retryable => Some(false),
            Attempt::Cancelled => None,
        }
    }
}

/// Decides what a result amounted to.
///
/// See the [example](crate::retry::DeadlineRetry#examples).
pub trait Classify<Res, E> {
    /// Classify one attempt's result.
    ///
    /// See the [example](crate::retry::DeadlineRetry#examples).
    fn classify(&self, result: &Result<Res, E>) -> Attempt;
}

impl<Res, E, F> Classify<Res, E> for F
where
    F: Fn(&Result<Res, E>) -> Attempt,
{
    fn classify(&self, result: &Result<Res, E>) -> Attempt {
        self(result)
    }
}

/// Classifies errors that carry a [`BudgetError`] (as hopbudget's client layers return) and
/// treats every other error as retryable and every response as done; a call rejected locally
/// by a [`ThrottleLayer`](crate::throttle::ThrottleLayer) is done (not retried).
///
/// See the [example](crate::retry::DeadlineRetry#examples).
#[derive(Clone, Copy, Debug, Default)]
pub struct BudgetErrors;

impl<Res> Classify<Res, tower::BoxError> for BudgetErrors {
    fn classify(&self, result: &Result<Res, tower::BoxError>) -> Attempt {
        match result {
            Ok(_) => Attempt::Done,
            Err(e) => error_attempt(e),
        }
    }
}

/// What a failed call amounted to: its [`BudgetError`], else a failure a retry may fix. A
/// call the adaptive throttle rejected locally ([`Throttled`]) is done: its callee is full,
/// and a retry now would only be rejected again.
pub(crate) fn error_attempt(e: &tower::BoxError) -> Attempt {
    if e.is::<Throttled>() {
        return Attempt::Done;
    }
    match BudgetError::find(e.as_ref()) {
        Some(BudgetError::Refused(r)) => Attempt::Refused {
            required: Some(r.required()),
        },
        Some(BudgetError::Expired) => Attempt::Expired,
        Some(BudgetError::Cancelled) => Attempt::Cancelled,
        None => Attempt::Retryable,
    }
}
