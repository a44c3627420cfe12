//! The deadline ends an HTTP/2 answer too (#46 item 2, C4, C7): a caller that stops reading
//! one stream's answer has that stream reset at the deadline, and the connection's other
//! streams go on.
//!
//! hyper writes each HTTP/2 answer in a task of its own, spawned through the connection's
//! executor. While the caller's flow-control window is shut, that task waits for capacity and
//! does not poll the answer's body, so a timer kept in the body would never be looked at.
//! [`StreamExecutor`] wraps the task instead: once the answer's head is out, the task ends at
//! the answer's deadline. Dropping it drops the stream's last handles, and h2 then resets the
//! stream (`RST_STREAM` with `CANCEL`); the answer's body is dropped with it, so the hop ends
//! at that moment, as an HTTP/1.1 answer's does when its connection is closed
//! ([`super::client_waits::AnswerBy`]).
//!
//! The connection's service is called inside that task, on its first poll (hyper-util's
//! `TowerToHyperService` defers the call to a `Oneshot`), so the task lends the service its
//! slot through a thread-local while it polls, until the service has taken it: a poll runs
//! on one thread from start to end, so no other stream's call can see it.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use hopbudget::RequestBudget;
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

/// Streams reset by the proxy, by reason (`answer_deadline`: the caller had not read its
/// answer by the deadline).
pub(crate) const STREAMS_RESET_TOTAL: &str = "hopbudget_proxy_streams_reset_total";

/// One HTTP/2 stream's answer deadline: empty until the answer's head is out, then the budget
/// whose deadline (moved to the stream lifetime for a `mode: stream` route, C13) bounds it.
pub(crate) type AnswerSlot = Arc<Mutex<Option<RequestBudget>>>;

/// The executor of the caller connections: spawns hyper's HTTP/2 stream tasks, each bounded
/// by its answer's deadline.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StreamExecutor;

impl<F> hyper::rt::Executor<F> for StreamExecutor
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, task: F) {
        tokio::spawn(EndsAtDeadline {
            task,
            slot: AnswerSlot::default(),
            lent: true,
            sleep: None,
        });
    }
}

thread_local! {
    /// The slot of the stream task being polled on this thread, until its service takes it.
    static POLLED_STREAM: Cell<Option<AnswerSlot>> = const { Cell::new(None) };
}

/// For the connection's service, called for an HTTP/2 request: the slot of the stream task
/// that is polling the call, where the answer's budget goes once its head is out.
pub(crate) fn polled_stream_slot() -> Option<AnswerSlot> {
    POLLED_STREAM.with(Cell::take)
}

pin_project! {
    /// A stream's task, ended at its answer's deadline.
    struct EndsAtDeadline<F> {
        #[pin]
        task: F,
        slot: AnswerSlot,
        // Still to be taken by the service's call.
        lent: bool,
        // Made the first time the task waits after the answer's head is out.
        sleep: Option<Pin<Box<Sleep>>>,
    }
}

impl<F: Future<Output = ()>> Future for EndsAtDeadline<F> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.project();
        let done = if *this.lent {
            POLLED_STREAM.with(|polled| polled.set(Some(this.slot.clone())));
            let done = this.task.poll(cx);
            // Taken, or a task that is no stream's (then never taken, and never bounded).
            *this.lent = POLLED_STREAM.with(Cell::take).is_some();
            done
        } else {
            this.task.poll(cx)
        };
        if done.is_ready() {
            return Poll::Ready(());
        }
        // Read each time: a stream route's deadline moves after the first byte (C13).
        let Some(due) = this
            .slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|budget| budget.deadline().instant())
        else {
            // The service is still working on the answer: its budget bounds that (C4).
            return Poll::Pending;
        };
        if Instant::now() < due {
            let sleep = this
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
            if sleep.deadline() != due {
                sleep.as_mut().reset(due);
            }
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        metrics::counter!(STREAMS_RESET_TOTAL, "reason" => "answer_deadline").increment(1);
        tracing::debug!("the caller did not read its answer by the deadline; stream reset");
        Poll::Ready(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hopbudget::Profile;
    use std::time::Duration;

    fn budget(ms: u64) -> RequestBudget {
        RequestBudget::local(Duration::from_millis(ms), Profile::default().policy())
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_still_waiting_at_its_answers_deadline_is_ended_then() {
        let start = Instant::now();
        // As hyper's stream task: the service is called on the first poll and takes the
        // slot, works on the answer for 5 s (nothing bounds the task here meanwhile), the
        // head goes out with a 500 ms budget, and the body then waits for a window the caller
        // never opens.
        let task = async move {
            let head_out = polled_stream_slot().expect("lent to the call");
            assert!(polled_stream_slot().is_none(), "lent once");
            tokio::time::sleep(Duration::from_secs(5)).await;
            *head_out.lock().unwrap() = Some(budget(500));
            std::future::pending::<()>().await;
        };
        tokio::spawn(EndsAtDeadline {
            task,
            slot: AnswerSlot::default(),
            lent: true,
            sleep: None,
        })
        .await
        .unwrap();
        assert_eq!(start.elapsed(), Duration::from_millis(5_500));
        assert!(polled_stream_slot().is_none(), "nothing left behind");
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_that_ends_first_is_left_alone() {
        let slot = AnswerSlot::new(Mutex::new(Some(budget(500))));
        let start = Instant::now();
        tokio::spawn(EndsAtDeadline {
            task: tokio::time::sleep(Duration::from_millis(100)),
            slot,
            lent: false,
            sleep: None,
        })
        .await
        .unwrap();
        assert_eq!(start.elapsed(), Duration::from_millis(100));
    }
}
