use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http_body::Body;
use pin_project_lite::pin_project;
use tokio::time::Sleep;

use super::ResponseBody;
use super::body::answer_length;
use super::linger::LentBody;
use crate::answer::http::http_answer;
use crate::codec::marker::Marker;
use crate::hop::HopGuard;
use crate::outcome::Outcome;
use crate::status::HttpStatusMap;
use crate::{budget::RequestBudget, error::Refused};

pin_project! {
    /// Response future of [`ServerBudget`](super::ServerBudget).
    ///
    /// Dropping it before it finishes (hyper does so when the client disconnects) cancels
    /// the request's budget, and with it every child call and task ([C5](crate::contract#c5)). Like tower's
    /// futures it panics if polled again after it finished.
    ///
    /// See the [module example](super#example).
    pub struct ResponseFuture<F, B> {
        #[pin]
        state: State<F, B>,
        // Created only once the handler has returned `Pending`: a handler that answers at
        // once registers no timer. In place, not boxed (#51): a handler that waits, the
        // common one, paid an allocation for it on every request.
        #[pin]
        sleep: Option<Sleep>,
        guard: Option<HopGuard>,
        status: HttpStatusMap,
        // The request body, lent through the layer, to drain if the deadline answer leaves
        // it unread (an axum body only; see `linger::LentBody`).
        lent: Option<LentBody>,
        // An answer to `HEAD` has no body on the wire, whatever the handler returns (C17).
        head_request: bool,
        _body: PhantomData<fn() -> B>,
    }

    impl<F, B> PinnedDrop for ResponseFuture<F, B> {
        fn drop(this: Pin<&mut Self>) {
            let mut this = this.project();
            let Some(guard) = this.guard.take() else {
                return;
            };
            // Unfinished and dropped: the client went away (C5). Drop the handler inside the
            // budget's scope, as tokio's task-local futures do, after the guard has cancelled
            // the tree, so the handler's own clean-up already sees the cause.
            let budget = guard.budget().clone();
            drop(guard);
            budget.sync_scope(|| this.state.set(State::Done));
        }
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, B> {
        // The rare answers the layer makes itself are boxed to keep the common future small.
        Answer {
            response: Option<Box<Response<Bytes>>>,
        },
        // The handler's future, polled inside the budget's task-local scope and the hop's
        // span (through the guard).
        Running {
            #[pin]
            inner: F,
        },
        // A stream route (C13): the deadline covers the time to the first body frame, which
        // is awaited here, where an expiry can still be a 504.
        FirstFrame {
            first: Option<Box<(http::response::Parts, Pin<Box<B>>, Option<u64>)>>,
        },
        Done,
    }
}

impl<F, B> ResponseFuture<F, B> {
    pub(super) fn answer(response: Response<Bytes>) -> Self {
        Self {
            state: State::Answer {
                response: Some(Box::new(response)),
            },
            sleep: None,
            guard: None,
            status: HttpStatusMap::default(),
            lent: None,
            head_request: false,
            _body: PhantomData,
        }
    }

    pub(super) fn running(
        inner: F,
        guard: HopGuard,
        status: HttpStatusMap,
        lent: Option<LentBody>,
        head_request: bool,
    ) -> Self {
        Self {
            state: State::Running { inner },
            sleep: None,
            guard: Some(guard),
            status,
            lent,
            head_request,
            _body: PhantomData,
        }
    }
}

impl<F, B> fmt::Debug for ResponseFuture<F, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Answer { .. } => "answer",
            State::Running { .. } => "running",
            State::FirstFrame { .. } => "first-frame",
            State::Done => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .field("budget", &self.guard.as_ref().map(HopGuard::budget))
            .finish()
    }
}

/// The outcome a handler's own answer states ([C17](crate::contract#c17)): its expiry, refusal or cancellation,
/// read as a hopbudget client reads it (the `x-deadline-outcome` mark first, then the
/// profile's status codes).
#[inline]
fn note_answer(guard: &mut HopGuard, status: &HttpStatusMap, res: &http::response::Parts) {
    guard.answer_status(crate::hop::AnswerStatus::Http(res.status.as_u16()));
    let headers = &res.headers;
    match crate::codec::answer::http_outcome(status, res.status.as_u16(), headers) {
        Outcome::Completed => {}
        Outcome::Refused => {
            let refused = crate::codec::marker::refusal(headers)
                .unwrap_or(Refused::new(Duration::ZERO, Duration::ZERO));
            guard.answered_refused(refused);
        }
        outcome => guard.answered(outcome),
    }
}

/// A handler's own expiry or cancellation answer (a 504 it returned for a downstream that ran
/// out of time) carries the `x-deadline-outcome` marker as the layer's own answers do, so the
/// hop above can tell it from a proxy's own timeout, which has no marker ([C4](crate::contract#c4), [C17](crate::contract#c17)).
#[inline]
fn mark_handler_outcome(res: &mut http::response::Parts, status: &HttpStatusMap) {
    let code = res.status.as_u16();
    let outcome = if code == status.expired {
        Outcome::Expired
    } else if code == status.cancelled {
        Outcome::Cancelled
    } else {
        return;
    };
    // The handler's own marker, if it set one, stands.
    crate::codec::marker::mark_unless_marked(&mut res.headers, Marker::Stated(outcome));
}

impl<F, B, E> Future for ResponseFuture<F, B>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Body<Data = Bytes>,
{
    type Output = Result<Response<ResponseBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Answer { response } => {
                    let response = response.take();
                    this.state.set(State::Done);
                    if let Some(res) = response {
                        return Poll::Ready(Ok((*res).map(ResponseBody::full)));
                    }
                }
                StateProj::Running { inner } => {
                    let Some(guard) = this.guard.as_mut() else {
                        break;
                    };
                    // The scope stays entered while the result is matched, so the answer
                    // moves once, straight out of the handler's output: bound to a local
                    // first, it was copied whole (a memcpy of ~150 bytes) on every request.
                    let entered = guard.entered();
                    match inner.poll(cx) {
                        Poll::Ready(Ok(res)) => {
                            drop(entered);
                            // The handler answered: what it left of the body is its own
                            // choice, as without the layer.
                            this.lent.take();
                            // Taken apart at once: the head and the body then move to the
                            // answer separately, each small enough to copy inline.
                            let (mut parts, body) = res.into_parts();
                            note_answer(guard, this.status, &parts);
                            mark_handler_outcome(&mut parts, this.status);
                            let length = answer_length(*this.head_request, &parts, &body);
                            // An answer with no body by protocol has no first frame to wait
                            // for: it is complete once its head is handed over.
                            if guard.stream_lifetime().is_some() && length != Some(0) {
                                this.state.set(State::FirstFrame {
                                    first: Some(Box::new((parts, Box::pin(body), length))),
                                });
                                continue;
                            }
                            this.state.set(State::Done);
                            let body = ResponseBody::inner(body, this.guard.take(), length);
                            return Poll::Ready(Ok(Response::from_parts(parts, body)));
                        }
                        Poll::Ready(Err(e)) => {
                            drop(entered);
                            this.lent.take();
                            // The service failed on its own and sends no answer: hyper closes
                            // the connection or resets the stream. Not `completed` (C17): the
                            // guard is dropped as for an abandoned answer, so the hop ends as
                            // the budget's end cause, `expired` past the deadline, else
                            // `cancelled`, and the request's tree is ended with it.
                            drop(this.guard.take());
                            this.state.set(State::Done);
                            return Poll::Ready(Err(e));
                        }
                        Poll::Pending => {
                            drop(entered);
                            break;
                        }
                    }
                }
                StateProj::FirstFrame { first: waiting } => {
                    let (Some(guard), Some(held)) = (this.guard.as_mut(), waiting.as_mut()) else {
                        break;
                    };
                    let inner_body = &mut held.1;
                    let Poll::Ready(first) = guard.enter(|| inner_body.as_mut().poll_frame(cx))
                    else {
                        break;
                    };
                    let Some(held) = waiting.take() else { break };
                    let (parts, body, length) = *held;
                    this.state.set(State::Done);
                    let mut guard = this.guard.take();
                    let body = match (first, guard.as_mut()) {
                        (Some(first), Some(g)) => {
                            // C13: the first chunk is out; the request deadline no longer
                            // ends the stream, nor the work feeding it. An error or trailers
                            // as the first frame is no chunk: nothing started streaming, and
                            // the request deadline still bounds the budget (#32).
                            if first.as_ref().is_ok_and(http_body::Frame::is_data) {
                                g.stream_started();
                            }
                            ResponseBody::stream(first, body, guard, length)
                        }
                        // Ended before any frame: an empty body, the answer complete.
                        _ => {
                            if let Some(mut g) = guard {
                                g.finish();
                            }
                            ResponseBody::full(Bytes::new())
                        }
                    };
                    return Poll::Ready(Ok(Response::from_parts(parts, body)));
                }
                StateProj::Done => panic!("`ResponseFuture` polled after completion"),
            }
        }

        // The handler is pending: now the deadline timer matters.
        let Some(guard) = this.guard.as_mut() else {
            return Poll::Pending;
        };
        if !guard.budget().is_enforced() {
            // Unenforced (C24): the handler runs to its end, whatever the deadline.
            return Poll::Pending;
        }
        if this.sleep.is_none() {
            this.sleep.set(Some(tokio::time::sleep_until(
                guard.budget().deadline().instant(),
            )));
        }
        if let Some(sleep) = this.sleep.as_pin_mut() {
            ready!(sleep.poll(cx));
        }
        // C4, C7: the deadline passed while the handler ran. Mark the tree expired so that
        // spawned children stop, drop the handler inside the scope, answer with the expiry
        // status.
        guard.expired();
        let budget: RequestBudget = guard.budget().clone();
        this.guard.take();
        budget.sync_scope(|| this.state.set(State::Done));
        let mut answer = http_answer(&crate::error::BudgetError::Expired, this.status);
        if let Some(lent) = this.lent.take() {
            // The handler may have been waiting for the body: drain the rest so an HTTP/1.1
            // client still writing it reads this answer instead of a reset (C18).
            lent.drain_after(&mut answer);
        }
        Poll::Ready(Ok(answer.map(ResponseBody::full)))
    }
}
