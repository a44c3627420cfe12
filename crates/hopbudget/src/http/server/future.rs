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
use super::service::expired_response;
use crate::RequestBudget;
use crate::observe::Hop;
use crate::status::{HttpStatusMap, Outcome};

pin_project! {
    /// Response future of [`ServerBudget`](super::ServerBudget).
    ///
    /// Dropping it before it finishes (hyper does so when the client disconnects) cancels
    /// the request's budget, and with it every child call and task (C5).
    pub struct ResponseFuture<F, B> {
        #[pin]
        state: State<F, B>,
        // Created only once the handler has returned `Pending`, as `tower::timeout` does: a
        // handler that answers at once registers no timer.
        // Boxed as well: only a handler that actually waits pays for it, and the future
        // everyone else moves around stays small.
        sleep: Option<Pin<Box<Sleep>>>,
        guard: Option<Guard>,
        _body: PhantomData<fn() -> B>,
    }

    impl<F, B> PinnedDrop for ResponseFuture<F, B> {
        fn drop(this: Pin<&mut Self>) {
            let mut this = this.project();
            let Some(guard) = this.guard.as_mut() else {
                return;
            };
            // Unfinished and dropped: the client went away (C5). Record it and cancel the tree
            // first, so the handler's own clean-up already sees the cause; then drop the
            // handler inside the budget's scope, as tokio's task-local futures do.
            guard.abandon();
            if matches!(this.state.as_mut().project(), StateProj::Running { .. }) {
                let budget = guard.budget.clone();
                budget.sync_scope(|| this.state.set(State::Done));
            }
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
        // span. Held unwrapped: wrapping it in `TaskLocalFuture` and `Instrumented` cost two
        // more moves of the whole future per request, which showed up as memcpy.
        Running {
            #[pin]
            inner: F,
        },
        FirstFrame {
            first: Option<Box<(http::response::Parts, Pin<Box<B>>)>>,
        },
        Done,
    }
}

/// Everything that must happen exactly once when the request ends, even if it ends by being
/// dropped.
struct Guard {
    budget: RequestBudget,
    hop: Option<Hop>,
    status: HttpStatusMap,
    /// `Some` for streaming routes (C13).
    stream_lifetime: Option<Duration>,
}

impl Guard {
    fn finish(&mut self, outcome: Outcome) {
        if let Some(hop) = self.hop.take() {
            hop.finish(outcome);
        }
    }

    /// Work that returned after its deadline is counted (C14); its answer still goes out.
    fn check_late(&self) {
        let overrun =
            tokio::time::Instant::now().saturating_duration_since(self.budget.deadline().instant());
        if overrun.is_zero() {
            return;
        }
        if let Some(hop) = &self.hop {
            hop.late_work(overrun);
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.abandon();
    }
}

impl Guard {
    /// The request ended without an answer: record it and cancel the budget. Idempotent.
    fn abandon(&mut self) {
        if let Some(hop) = self.hop.take() {
            // The response future went away unfinished: the client disconnected (C5). If the
            // deadline had already passed, `cancel` records expired instead (C4).
            self.budget.cancel();
            let outcome = self
                .budget
                .end_cause()
                .map_or(Outcome::Cancelled, Outcome::from);
            hop.finish(outcome);
        }
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
            _body: PhantomData,
        }
    }

    pub(super) fn running(
        inner: F,
        budget: RequestBudget,
        hop: Hop,
        status: HttpStatusMap,
        stream_lifetime: Option<Duration>,
    ) -> Self {
        Self {
            state: State::Running { inner },
            sleep: None,
            guard: Some(Guard {
                budget,
                hop: Some(hop),
                status,
                stream_lifetime,
            }),
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
            .field("budget", &self.guard.as_ref().map(|g| &g.budget))
            .finish()
    }
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
                    match response {
                        Some(res) => return Poll::Ready(Ok((*res).map(ResponseBody::full))),
                        None => return Poll::Pending,
                    }
                }
                StateProj::Running { inner } => {
                    let Some(guard) = this.guard.as_mut() else {
                        return Poll::Pending;
                    };
                    let polled = {
                        let _entered = guard.hop.as_ref().map(|hop| hop.span().enter());
                        let budget = guard.budget.clone();
                        budget.sync_scope(|| inner.poll(cx))
                    };
                    match polled {
                        Poll::Ready(Ok(mut res)) => {
                            guard.check_late();
                            mark_handler_outcome(&mut res, &guard.status);
                            match guard.stream_lifetime {
                                None => {
                                    guard.finish(Outcome::Completed);
                                    this.state.set(State::Done);
                                    return Poll::Ready(Ok(res.map(ResponseBody::inner)));
                                }
                                Some(_) => {
                                    // C13: the deadline covers the time to the first chunk;
                                    // wait for it here, where a 504 can still be sent.
                                    let (parts, body) = res.into_parts();
                                    this.state.set(State::FirstFrame {
                                        first: Some(Box::new((parts, Box::pin(body)))),
                                    });
                                    continue;
                                }
                            }
                        }
                        Poll::Ready(Err(e)) => {
                            // The service failed on its own: not a deadline outcome.
                            guard.finish(Outcome::Completed);
                            this.state.set(State::Done);
                            return Poll::Ready(Err(e));
                        }
                        Poll::Pending => {}
                    }
                }
                StateProj::FirstFrame { first: waiting } => {
                    let (Some(guard), Some(held)) = (this.guard.as_mut(), waiting.as_mut()) else {
                        return Poll::Pending;
                    };
                    let inner_body = &mut held.1;
                    let lifetime = guard.stream_lifetime.unwrap_or_default();
                    let first = match inner_body.as_mut().poll_frame(cx) {
                        Poll::Ready(first) => Some(first),
                        Poll::Pending => None,
                    };
                    if let Some(first) = first {
                        guard.finish(Outcome::Completed);
                        let Some(held) = waiting.take() else {
                            return Poll::Pending;
                        };
                        let (parts, body) = *held;
                        this.state.set(State::Done);
                        let body = match first {
                            Some(first) => ResponseBody::stream(Some(first), body, lifetime),
                            // Ended before any frame: an empty body, not a stream.
                            None => ResponseBody::full(Bytes::new()),
                        };
                        return Poll::Ready(Ok(Response::from_parts(parts, body)));
                    }
                }
                StateProj::Done => return Poll::Pending,
            }
            break;
        }

        // The inner work is pending: now the deadline timer matters.
        let Some(guard) = this.guard.as_mut() else {
            return Poll::Pending;
        };
        let sleep = this.sleep.get_or_insert_with(|| {
            Box::pin(tokio::time::sleep_until(guard.budget.deadline().instant()))
        });
        ready!(sleep.as_mut().poll(cx));
        // C4, C7: the deadline passed while the handler ran. Mark the tree expired so that
        // spawned children stop, drop the handler, answer with the expiry status.
        guard.budget.expire();
        guard.finish(Outcome::Expired);
        let response = expired_response(&guard.status);
        this.state.set(State::Done);
        Poll::Ready(Ok(response.map(ResponseBody::full)))
    }
}

/// A handler's own expiry or cancellation answer (a 504 it returned for a downstream that ran
/// out of time) carries the `x-deadline-outcome` marker as the layer's own answers do, so the
/// hop above can tell it from a proxy's own timeout, which has no marker (C4, C17).
fn mark_handler_outcome<B>(res: &mut Response<B>, status: &HttpStatusMap) {
    let name = match status.classify(res.status().as_u16()) {
        Outcome::Expired => "expired",
        Outcome::Cancelled => "cancelled",
        _ => return,
    };
    res.headers_mut()
        .entry(&super::super::OUTCOME_HEADER)
        .or_insert(http::HeaderValue::from_static(name));
}
