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
use tokio::task::futures::TaskLocalFuture;
use tokio::time::Sleep;
use tracing::instrument::Instrumented;

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
        #[pin]
        sleep: Option<Sleep>,
        guard: Option<Guard>,
        _body: PhantomData<fn() -> B>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, B> {
        Answer {
            response: Option<Response<Bytes>>,
        },
        Running {
            #[pin]
            inner: TaskLocalFuture<RequestBudget, Instrumented<F>>,
        },
        FirstFrame {
            parts: Option<http::response::Parts>,
            body: Option<Pin<Box<B>>>,
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
                response: Some(response),
            },
            sleep: None,
            guard: None,
            _body: PhantomData,
        }
    }

    pub(super) fn running(
        inner: TaskLocalFuture<RequestBudget, Instrumented<F>>,
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
                        Some(res) => return Poll::Ready(Ok(res.map(ResponseBody::full))),
                        None => return Poll::Pending,
                    }
                }
                StateProj::Running { inner } => {
                    let Some(guard) = this.guard.as_mut() else {
                        return Poll::Pending;
                    };
                    match inner.poll(cx) {
                        Poll::Ready(Ok(res)) => {
                            guard.check_late();
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
                                        parts: Some(parts),
                                        body: Some(Box::pin(body)),
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
                StateProj::FirstFrame { parts, body } => {
                    let (Some(guard), Some(inner_body)) = (this.guard.as_mut(), body.as_mut())
                    else {
                        return Poll::Pending;
                    };
                    let lifetime = guard.stream_lifetime.unwrap_or_default();
                    let first = match inner_body.as_mut().poll_frame(cx) {
                        Poll::Ready(first) => Some(first),
                        Poll::Pending => None,
                    };
                    if let Some(first) = first {
                        guard.finish(Outcome::Completed);
                        let (Some(parts), Some(body)) = (parts.take(), body.take()) else {
                            return Poll::Pending;
                        };
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
        if this.sleep.is_none() {
            this.sleep.set(Some(tokio::time::sleep_until(
                guard.budget.deadline().instant(),
            )));
        }
        if let Some(sleep) = this.sleep.as_mut().as_pin_mut() {
            ready!(sleep.poll(cx));
        }
        // C4, C7: the deadline passed while the handler ran. Mark the tree expired so that
        // spawned children stop, drop the handler, answer with the expiry status.
        guard.budget.expire();
        guard.finish(Outcome::Expired);
        let response = expired_response(&guard.status);
        this.state.set(State::Done);
        Poll::Ready(Ok(response.map(ResponseBody::full)))
    }
}
