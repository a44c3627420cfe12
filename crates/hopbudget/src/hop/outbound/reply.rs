//! The late cancel, the one reading of a downstream's answer that needs the caller's budget
//! (rule [C4](crate::contract#c4)): a `cancelled` answer that arrives once the deadline the
//! callee was told has passed (or once the call's own budget expired) is `expired`. The
//! callee's time was up; what it saw as its caller leaving was the deadline (our wait, a proxy
//! or tonic's own timer giving up at it). Running out of time is never cancellation. One rule
//! for both protocols; a `cancelled` that arrives while the callee still had time stays
//! `cancelled`. What the answer itself states is read by [`codec::answer`](crate::codec::answer).

use crate::error::EndCause;
use crate::outcome::Outcome;
use crate::{budget::Deadline, budget::RequestBudget};

/// Step 3, the late cancel: `stated` as this hop reports it, for a call whose callee was told
/// `told` and which runs under `budget`.
pub(crate) fn settle(stated: Outcome, told: Deadline, budget: &RequestBudget) -> Outcome {
    match stated {
        Outcome::Cancelled
            if told.is_expired() || budget.end_cause() == Some(EndCause::Expired) =>
        {
            Outcome::Expired
        }
        outcome => outcome,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::budget::HopPolicy;

    #[tokio::test(start_paused = true)]
    async fn a_cancel_after_the_callees_deadline_is_expiry() {
        let budget = RequestBudget::local(Duration::from_millis(100), HopPolicy::DEFAULT);
        let told = Deadline::after(Duration::from_millis(94));
        assert_eq!(
            settle(Outcome::Cancelled, told, &budget),
            Outcome::Cancelled
        );
        tokio::time::advance(Duration::from_millis(94)).await;
        assert_eq!(settle(Outcome::Cancelled, told, &budget), Outcome::Expired);
        assert_eq!(settle(Outcome::Refused, told, &budget), Outcome::Refused);
    }
}
