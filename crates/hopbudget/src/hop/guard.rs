//! The guard a request holds from admission until its answer is complete.

use std::cell::Cell;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::record::{AnswerStatus, Hop, Would};
use crate::learned::LearnedThreshold;
use crate::{budget::RequestBudget, error::Refused, outcome::Outcome};

/// Owns one admitted request's budget and [`Hop`], and records exactly one outcome.
///
/// - [`enter`](Self::enter) runs a poll of the handler or of the response body inside the
///   budget's task-local scope and the hop's span.
/// - [`answered`](Self::answered) notes the outcome the answer itself states (a handler's own
///   504, 503 refusal, 499, DEADLINE_EXCEEDED or CANCELLED: rule [C17](crate::contract#c17)).
/// - [`expired`](Self::expired) is the adapter's deadline timer firing: the budget is marked
///   expired (its tree stops, [C7](crate::contract#c7)) and the hop ends `expired`.
/// - [`finish`](Self::finish) is the answer having gone out completely. The outcome is the
///   answer's own, else the budget's end cause, else `completed`; an answer completed after the
///   deadline is late work and `expired`. Then the request's non-detached work is ended, as Go
///   cancels a request's context when its handler returns.
/// - Dropped before either: the caller went away, or the service below the adapter failed
///   and sent no answer (an inner `Err` is never `completed`). The budget is cancelled and
///   the outcome is its end cause: `cancelled`, or `expired` when the deadline had already
///   passed ([C4](crate::contract#c4), [C5](crate::contract#c5)). An adapter whose body was delivered in full (its last byte handed over,
///   or none to send by protocol) calls `finish` first, whatever its server does with the
///   body afterwards ([C17](crate::contract#c17)).
///
/// See the [example](super#example-a-custom-protocol-adapter).
pub struct HopGuard {
    /// Boxed, so that the guard the adapters move from admission into their futures and
    /// bodies is one pointer; the box is handed to the next guard made on the same thread
    /// (see [`SPARE`]). `None` only inside `Drop`.
    state: Option<Box<State>>,
}

/// What a [`HopGuard`] owns.
#[derive(Debug)]
struct State {
    /// Empty only while [`HopGuard::enter`] runs, which lends it to the ambient slot.
    budget: Option<RequestBudget>,
    hop: Option<Hop>,
    stream_lifetime: Option<Duration>,
    streaming: bool,
    answer: Option<Answer>,
    /// The route's learned threshold: a completed answer records its latency there.
    learned: Option<Arc<LearnedThreshold>>,
    /// A gRPC method no answer has proved yet: the hop is labelled `other` until the
    /// service answers it as a method it has ([C20](crate::contract#c20)).
    unproved: Option<Arc<str>>,
}

thread_local! {
    /// The box of the last guard dropped on this thread, for the next guard: a hop's guard is
    /// made and dropped once per request, and a server thread does one request after
    /// another.
    static SPARE: Cell<Option<Box<State>>> = const { Cell::new(None) };
}

impl fmt::Debug for HopGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.state {
            Some(state) => state.fmt(f),
            None => f.write_str("HopGuard(dropped)"),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Answer {
    Outcome(Outcome),
    Refused(Duration),
}

impl HopGuard {
    pub(crate) fn new(budget: RequestBudget, hop: Hop, stream_lifetime: Option<Duration>) -> Self {
        let state = match SPARE.try_with(Cell::take) {
            Ok(Some(mut spare)) => {
                // Field by field: a spare holds nothing that needs dropping (see `Drop`), and
                // assigning a whole `State` would first copy it to the stack.
                spare.budget = Some(budget);
                spare.hop = Some(hop);
                spare.stream_lifetime = stream_lifetime;
                spare.streaming = false;
                spare.answer = None;
                spare.learned = None;
                spare.unproved = None;
                spare
            }
            _ => Box::new(State {
                budget: Some(budget),
                hop: Some(hop),
                stream_lifetime,
                streaming: false,
                answer: None,
                learned: None,
                unproved: None,
            }),
        };
        Self { state: Some(state) }
    }

    #[inline]
    fn state(&self) -> &State {
        match &self.state {
            Some(state) => state,
            None => unreachable!("a guard's state is taken only by its own `Drop`"),
        }
    }

    #[inline]
    fn state_mut(&mut self) -> &mut State {
        match &mut self.state {
            Some(state) => state,
            None => unreachable!("a guard's state is taken only by its own `Drop`"),
        }
    }

    /// Record this request's latency, admission to complete answer, into the route's learned
    /// threshold when it completes (not when refused, expired or cancelled: those say nothing
    /// about how long the work takes).
    pub(crate) fn learning(mut self, learned: Option<&Arc<LearnedThreshold>>) -> Self {
        self.state_mut().learned = learned.cloned();
        self
    }

    /// The call is to `method`, a gRPC method path no answer has proved yet ([C20](crate::contract#c20)).
    pub(crate) fn unproved_method(mut self, method: Option<&str>) -> Self {
        if let Some(method) = method {
            self.state_mut().unproved = Some(Arc::from(method));
        }
        self
    }

    /// The service answered this call as a method it has (a message, or any status but
    /// UNIMPLEMENTED): a method not labelled yet takes its own label, this hop's included,
    /// while `config`'s cap leaves room ([C20](crate::contract#c20)). Does nothing for a call already labelled.
    pub(crate) fn method_answered(&mut self, config: &super::HopConfig) {
        let state = self.state_mut();
        let Some(method) = state.unproved.take() else {
            return;
        };
        if let (Some(label), Some(hop)) = (config.learn_method(&method), state.hop.as_mut()) {
            hop.relabel(config.service(), &label);
        }
    }

    /// The request's budget.
    ///
    /// See the [example](super#example-a-custom-protocol-adapter).
    #[inline]
    pub fn budget(&self) -> &RequestBudget {
        self.state()
            .budget
            .as_ref()
            .expect("a guard's budget is lent out only while `enter` runs, which borrows the guard")
    }

    /// Run `f` (a poll of the handler or of its body) inside the budget's task-local scope
    /// and the hop's span.
    ///
    /// See the [example](super#example-a-custom-protocol-adapter).
    #[inline]
    pub fn enter<R>(&mut self, f: impl FnOnce() -> R) -> R {
        let _entered = self.entered();
        f()
    }

    /// The budget's scope and the hop's span, entered until the returned guard is dropped:
    /// [`enter`](Self::enter) without a closure, for the adapters' hot paths.
    // Always inlined: it runs three times per request (around `call`, the handler's poll and
    // the body's poll), and out of line its prologue and epilogue cost as much as its work.
    #[inline(always)]
    pub(crate) fn entered(&mut self) -> Entered<'_> {
        let state = self.state_mut();
        Entered {
            _lent: crate::budget::lend(&mut state.budget),
            _span: state.hop.as_ref().map(|hop| hop.span().enter()),
        }
    }

    /// The stream lifetime, on a stream route ([C13](crate::contract#c13)).
    ///
    /// See the [example](super#example-a-custom-protocol-adapter).
    pub fn stream_lifetime(&self) -> Option<Duration> {
        self.state().stream_lifetime
    }

    /// Whether the first chunk of a stream route went out.
    ///
    /// See the [example](super#example-a-custom-protocol-adapter).
    pub fn is_streaming(&self) -> bool {
        self.state().streaming
    }

    /// The first chunk of a stream route went out: from now on the budget, and everything
    /// spawned or called under it, runs under the stream lifetime instead of the request
    /// deadline ([C13](crate::contract#c13), [S12](crate::contract#s12)). Does nothing on other routes.
    ///
    /// See the [example](super#example-a-custom-protocol-adapter).
    pub fn stream_started(&mut self) {
        let state = self.state_mut();
        if let (Some(lifetime), false) = (state.stream_lifetime, state.streaming) {
            state.streaming = true;
            self.budget().start_stream(lifetime);
        }
    }

    /// The answer states this outcome itself ([C17](crate::contract#c17)): a handler's own expiry, refusal or
    /// cancellation status. `completed` clears an earlier note.
    ///
    /// See the [example](super#example-a-custom-protocol-adapter).
    pub fn answered(&mut self, outcome: Outcome) {
        self.state_mut().answer = Some(Answer::Outcome(outcome));
    }

    /// The status the caller is answered with, for the hop's span and log line (an HTTP
    /// status, or a gRPC code): `completed` also covers a 404 or a 500, and this tells them
    /// apart (issue #33).
    pub(crate) fn answer_status(&mut self, status: AnswerStatus) {
        if let Some(hop) = self.state_mut().hop.as_mut() {
            hop.answer_status(status);
        }
    }

    /// The answer is a refusal stating what it needed ([C3](crate::contract#c3), [C17](crate::contract#c17)).
    ///
    /// See the [example](super#example-a-custom-protocol-adapter).
    pub fn answered_refused(&mut self, refused: Refused) {
        self.state_mut().answer = Some(Answer::Refused(refused.required()));
    }

    /// The adapter's deadline timer fired with the work still running: mark the budget
    /// expired, which stops its children ([C4](crate::contract#c4), [C7](crate::contract#c7)), and end the hop `expired`. The layer's own
    /// expiry answer is not late work.
    ///
    /// See the [example](super#example-a-custom-protocol-adapter).
    pub fn expired(&mut self) {
        self.budget().expire();
        if let Some(hop) = self.state_mut().hop.take() {
            hop.finish(Outcome::Expired);
        }
    }

    /// The answer went out completely: record the outcome and end the request's work.
    ///
    /// See the [example](super#example-a-custom-protocol-adapter).
    pub fn finish(&mut self) {
        let state = self.state_mut();
        let Some(mut hop) = state.hop.take() else {
            return;
        };
        let state = self.state();
        let now = tokio::time::Instant::now();
        let deadline = self.budget().deadline().instant();
        let enforced = self.budget().is_enforced();
        let late = (!state.streaming && now > deadline).then(|| now - deadline);
        if let Some(overrun) = late {
            // Work done for nobody: the caller's own deadline had passed (C14).
            hop.late_work(overrun);
        }
        let outcome = match state.answer {
            Some(Answer::Refused(required)) => {
                hop.refuse(required);
                Outcome::Refused
            }
            Some(Answer::Outcome(outcome)) if outcome != Outcome::Completed => {
                hop.finish(outcome);
                outcome
            }
            _ => {
                // The clock was read once above; the budget's own cause, else its deadline.
                let outcome = match self.budget().recorded_cause() {
                    Some(cause) => Outcome::from(cause),
                    None if now >= deadline && !enforced => {
                        // Unenforced (C24): the answer went out, after the deadline; the
                        // hop says what enforcement would have made of it.
                        hop.unenforced(Would::Expired);
                        Outcome::Completed
                    }
                    None if now >= deadline => Outcome::Expired,
                    None => Outcome::Completed,
                };
                hop.finish(outcome);
                outcome
            }
        };
        if let (Some(learned), Outcome::Completed, false) =
            (&state.learned, outcome, state.streaming)
        {
            // The budget was made at admission from one clock read: deadline minus the budget
            // at arrival is that instant, so learning costs no extra clock read.
            if let Some(admitted) = deadline.checked_sub(self.budget().at_arrival()) {
                learned.record_at(now, now.saturating_duration_since(admitted));
            }
        }
        // The response is complete: the request's non-detached children end with it. An
        // answer that says the time ran out ends them as expired, so every hop that observes
        // the budget agrees (C4); any other answer ends them as Go ends a handler's context.
        // A budget nothing else holds has no one to tell.
        if self.budget().is_unshared() {
            return;
        }
        if outcome == Outcome::Expired {
            self.budget().expire();
        } else {
            self.budget().cancel_at(now);
        }
    }
}

/// What [`HopGuard::entered`] returns. The budget leaves the scope first, then the span is
/// exited, as with [`HopGuard::enter`].
pub(crate) struct Entered<'a> {
    _lent: crate::budget::Lent<'a>,
    _span: Option<tracing::span::Entered<'a>>,
}

impl Drop for HopGuard {
    fn drop(&mut self) {
        let Some(mut state) = self.state.take() else {
            return;
        };
        if let Some(hop) = state.hop.take() {
            record_abandoned(state.budget.as_ref(), hop);
        }
        if let Some(budget) = state.budget.take() {
            budget.recycle();
        }
        // Empty now but for the learned threshold: give the box to the next guard.
        state.learned = None;
        state.unproved = None;
        let _ = SPARE.try_with(|spare| spare.set(Some(state)));
    }
}

/// Dropped before the answer was complete: the caller went away.
fn record_abandoned(budget: Option<&RequestBudget>, hop: Hop) {
    let Some(budget) = budget else {
        // Lost only if the thread's ambient slot was torn down while lent (thread exit).
        hop.finish(Outcome::Cancelled);
        return;
    };
    // `cancel` records expired instead when the deadline had already passed (C4), and the
    // outcome is whatever the budget says. `cancel_at` records a cause unless one was
    // recorded already: either way the recorded cause is the outcome, with no second
    // clock read.
    let now = tokio::time::Instant::now();
    let outcome = if budget.is_unshared() {
        // Nothing else holds the budget: its end is this hop's outcome alone, decided
        // as `cancel_at` would record it.
        match budget.recorded_cause() {
            Some(cause) => Outcome::from(cause),
            None if now >= budget.deadline().instant() => Outcome::Expired,
            None => Outcome::Cancelled,
        }
    } else {
        budget.cancel_at(now);
        budget
            .recorded_cause()
            .map_or(Outcome::Cancelled, Outcome::from)
    };
    hop.finish(outcome);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::EndCause;
    use crate::observe::{HopLabels, Protocol};

    fn guard(budget: &RequestBudget, stream: Option<Duration>) -> HopGuard {
        let labels = HopLabels::new("svc", "/r", Protocol::Http);
        HopGuard::new(budget.clone(), Hop::start(&labels, budget), stream)
    }

    fn state_addr(guard: &HopGuard) -> *const State {
        guard.state()
    }

    /// A guard's box goes to the next guard on the thread, and nothing of the first request
    /// comes with it: not its answer, not its stream, not its learned threshold.
    #[tokio::test(start_paused = true)]
    async fn a_recycled_guard_starts_empty() {
        let first_budget = RequestBudget::local(Duration::from_secs(1), Default::default());
        let mut first = guard(&first_budget, Some(Duration::from_secs(10)));
        first.stream_started();
        first.answered(Outcome::Expired);
        let learned = Arc::new(LearnedThreshold::new(Duration::ZERO, Default::default()));
        first = first.learning(Some(&learned));
        let first_addr = state_addr(&first);
        drop(first);
        assert_eq!(
            Arc::strong_count(&learned),
            1,
            "the spare still holds the threshold"
        );

        let budget = RequestBudget::local(Duration::from_secs(1), Default::default());
        let mut second = guard(&budget, None);
        assert_eq!(state_addr(&second), first_addr, "the box was not reused");
        assert!(!second.is_streaming());
        assert_eq!(second.stream_lifetime(), None);
        // A completed answer ends the request's work as cancelled; the first request's
        // `expired` answer, had it stayed, would end it as expired.
        second.finish();
        assert_eq!(budget.end_cause(), Some(EndCause::Cancelled));
    }
}
