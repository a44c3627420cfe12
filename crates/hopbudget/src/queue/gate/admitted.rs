//! An admitted message's work: run under its budget and hop span, stopped at the deadline, and
//! how it ended ([`Admitted`], [`Processed`]).

use std::future::Future;
use std::pin::pin;
use std::task::Poll;

use super::DeadLetter;
use crate::error::EndCause;
use crate::hop::HopGuard;

/// A message the gate let through: the lifecycle's guard over its budget and hop, until the
/// work has run.
///
/// Dropping it without [`run`](Self::run) (or dropping `run`'s future half-way) cancels the budget
/// and records the hop as cancelled (rule [C5](crate::contract#c5)); the consumer does not
/// acknowledge the message, so the broker delivers it again, under the same deadline.
///
/// # Examples
///
/// A message stamped with an hour left runs under the gate's maximum processing budget, and
/// each way its work can end:
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::collections::HashMap;
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use hopbudget::queue::{Gate, Processed, Reason};
/// use hopbudget::{Profile, RequestBudget};
///
/// let gate = Gate::new(&Profile::default(), "orders")
///     .with_max_processing(Duration::from_millis(100));
/// let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis();
/// let message = HashMap::from([(
///     "deadline-epoch-ms".to_owned(),
///     (now_ms + 3_600_000).to_string(),
/// )]);
///
/// // Work that ends in time: acknowledge.
/// let admitted = gate.check(&message).into_result().unwrap();
/// assert_eq!(admitted.budget().at_arrival(), Duration::from_millis(100));
/// assert!(matches!(admitted.run(async { 42 }).await, Processed::Completed(42)));
///
/// // Work that would take a second is stopped at the deadline: acknowledge and dead-letter.
/// let admitted = gate.check(&message).into_result().unwrap();
/// match admitted.run(tokio::time::sleep(Duration::from_secs(1))).await {
///     Processed::Expired(dead) => assert_eq!(dead.reason(), Reason::Expired),
///     other => panic!("{other:?}"),
/// }
///
/// // Work whose budget is cancelled (the consumer is shutting down): leave it
/// // unacknowledged, the broker delivers it again.
/// let admitted = gate.check(&message).into_result().unwrap();
/// let shutdown = async {
///     RequestBudget::current().expect("runs in the message's budget").cancel();
///     std::future::pending::<()>().await
/// };
/// assert!(matches!(admitted.run(shutdown).await, Processed::Cancelled));
/// # }
/// ```
#[derive(Debug)]
pub struct Admitted {
    pub(super) guard: HopGuard,
}

/// How the work of an admitted message ended.
///
/// See the example on [`Admitted`].
#[derive(Debug)]
#[must_use = "an expired message must be dead-lettered, a cancelled one left unacknowledged"]
pub enum Processed<T> {
    /// The work finished in time, with this output: acknowledge.
    Completed(T),
    /// The deadline passed while the work ran; the work was stopped (rule
    /// [C7](crate::contract#c7)). Acknowledge and dead-letter it.
    Expired(DeadLetter),
    /// The budget was cancelled (the consumer is shutting down): do not acknowledge.
    Cancelled,
}

impl Admitted {
    /// The message's budget: clamped to the gate's maximum processing budget.
    ///
    /// See the [example](Self#examples).
    pub fn budget(&self) -> &crate::RequestBudget {
        self.guard.budget()
    }

    /// Run the message's work under its budget: every poll inside its task-local scope (so it
    /// propagates onward like any request's, rule [C11](crate::contract#c11)) and the hop's span,
    /// stopped at the deadline.
    ///
    /// See the [example](Self#examples).
    pub async fn run<F: Future>(self, work: F) -> Processed<F::Output> {
        let mut guard = self.guard;
        let budget = guard.budget().clone();
        if budget.end_cause() == Some(EndCause::Expired) {
            // It ran out before the work was first polled (waiting for a work slot): no work
            // ran, and the dead letter says so (#32).
            guard.expired();
            return Processed::Expired(DeadLetter::expired_while_waiting(budget.at_arrival()));
        }
        match run_guarded(&mut guard, work).await {
            Ok(out) => {
                guard.finish();
                Processed::Completed(out)
            }
            Err(EndCause::Expired) => {
                guard.expired();
                Processed::Expired(DeadLetter::expired_during_work(budget.at_arrival()))
            }
            Err(EndCause::Cancelled) => {
                guard.finish();
                Processed::Cancelled
            }
        }
    }
}

/// Poll `work` inside the guard (budget scope and hop span) until it is done or the budget ends: at
/// its deadline, which marks it expired and stops its tree ([C7](crate::contract#c7)), or by
/// cancellation.
pub(in crate::queue) async fn run_guarded<F: Future>(
    guard: &mut HopGuard,
    work: F,
) -> Result<F::Output, EndCause> {
    let budget = guard.budget().clone();
    if let Some(cause) = budget.end_cause() {
        return Err(cause);
    }
    let mut work = pin!(work);
    let mut done = pin!(budget.done());
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = guard.enter(|| work.as_mut().poll(cx)) {
            return Poll::Ready(Ok(out));
        }
        done.as_mut().poll(cx).map(Err)
    })
    .await
}
