//! What the hedging tests share, over HTTP and gRPC alike: a log of the attempts a tail-once
//! handler saw (the budget each arrived with and how it ended), and the checks that the hedge
//! forwarded the same shrinking budget (C23) and that the loser arrived
//! cancelled (C5), never as an error or an expiry.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopbudget::{EndCause, RequestBudget};

/// One attempt: the budget it arrived with, and how that budget ended (once it has).
type Attempt = (Duration, Option<EndCause>);

/// Per attempt, in arrival order.
#[derive(Clone, Default)]
pub(crate) struct Attempts(Arc<Mutex<Vec<Attempt>>>);

impl Attempts {
    /// Record an attempt's budget, and later how it ends, whoever ends it; the attempt's
    /// index in arrival order (0 is the first, the one the tail holds).
    pub(crate) fn arrived(&self, budget: &RequestBudget) -> usize {
        let n = {
            let mut seen = self.0.lock().unwrap();
            seen.push((budget.at_arrival(), None));
            seen.len() - 1
        };
        let record = self.0.clone();
        let watch = budget.clone();
        tokio::spawn(async move {
            let cause = watch.done().await;
            record.lock().unwrap()[n].1 = Some(cause);
        });
        n
    }

    /// After a hedged call of a 2 s budget with a 100 ms hedge delay answered: the first
    /// attempt's budget ended as cancelled (its stream was reset, C5), soon, not at its
    /// deadline; two attempts arrived; and the hedge carried the same budget, shrunk by at
    /// least the delay (a fresh one would be ~2 s again).
    pub(crate) async fn assert_hedged_once_and_the_loser_cancelled(&self) {
        let mut loser = None;
        for _ in 0..200 {
            loser = self.0.lock().unwrap()[0].1;
            if loser.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(
            loser,
            Some(EndCause::Cancelled),
            "the loser arrives cancelled"
        );
        let seen = self.0.lock().unwrap().clone();
        assert_eq!(seen.len(), 2);
        let (first, hedged) = (seen[0].0, seen[1].0);
        assert!(
            hedged + Duration::from_millis(90) < first,
            "first arrived with {first:?}, the hedge with {hedged:?}"
        );
        assert!(first < Duration::from_secs(2) && !hedged.is_zero());
    }
}
