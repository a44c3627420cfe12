use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;
use tower::Service;

use super::RefusalAnswer;
use super::layer::Shared;
use super::queue::{Slot, Waiter};

pin_project! {
    /// Response future of [`Admission`](super::Admission).
    ///
    /// While queued it holds the request and a ready clone of the service; dropping it then
    /// leaves the queue at once ([C5](crate::contract#c5)) and never leaks a slot. Once running, it holds the slot
    /// until the inner future finishes or is dropped.
    ///
    /// See the [module example](crate::admission#example).
    pub struct ResponseFuture<S, Req, A>
    where
        S: Service<Req>,
    {
        #[pin]
        state: State<S, Req, A>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, Req, A>
    where
        S: Service<Req>,
    {
        Answer {
            out: Option<Result<S::Response, S::Error>>,
        },
        // Boxed: only requests that queue pay for carrying the request and the service.
        Waiting {
            queued: Box<Queued<S, Req, A>>,
        },
        Running {
            #[pin]
            inner: S::Future,
            slot: Option<Slot>,
        },
    }
}

struct Queued<S, Req, A> {
    waiter: Waiter,
    service: S,
    req: Option<Req>,
    slot: Option<Slot>,
    shared: Arc<Shared<A>>,
}

impl<S, Req, A> ResponseFuture<S, Req, A>
where
    S: Service<Req>,
{
    pub(super) fn running(inner: S::Future, slot: Slot) -> Self {
        Self {
            state: State::Running {
                inner,
                slot: Some(slot),
            },
        }
    }

    pub(super) fn answer(out: Result<S::Response, S::Error>) -> Self {
        Self {
            state: State::Answer { out: Some(out) },
        }
    }

    pub(super) fn waiting(waiter: Waiter, service: S, req: Req, shared: Arc<Shared<A>>) -> Self {
        Self {
            state: State::Waiting {
                queued: Box::new(Queued {
                    waiter,
                    service,
                    req: Some(req),
                    slot: None,
                    shared,
                }),
            },
        }
    }
}

impl<S, Req, A> fmt::Debug for ResponseFuture<S, Req, A>
where
    S: Service<Req>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Answer { .. } => "answer",
            State::Waiting { .. } => "waiting",
            State::Running { .. } => "running",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}

impl<S, Req, A> Future for ResponseFuture<S, Req, A>
where
    S: Service<Req>,
    A: RefusalAnswer<S::Response, S::Error>,
{
    type Output = Result<S::Response, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Answer { out } => {
                    return match out.take() {
                        Some(out) => Poll::Ready(out),
                        None => Poll::Pending,
                    };
                }
                StateProj::Waiting { queued } => {
                    if queued.slot.is_none() {
                        match ready!(Pin::new(&mut queued.waiter).poll(cx)) {
                            Ok(slot) => queued.slot = Some(slot),
                            Err(error) => {
                                // Dropped before taking a slot (C21): the service never sees
                                // the request.
                                let out = queued.shared.answer.answer(error);
                                this.state.set(State::Answer { out: Some(out) });
                                continue;
                            }
                        }
                    }
                    if let Err(e) = ready!(queued.service.poll_ready(cx)) {
                        this.state.set(State::Answer { out: Some(Err(e)) });
                        continue;
                    }
                    let (Some(req), Some(slot)) = (queued.req.take(), queued.slot.take()) else {
                        return Poll::Pending;
                    };
                    let inner = queued.service.call(req);
                    this.state.set(State::Running {
                        inner,
                        slot: Some(slot),
                    });
                }
                StateProj::Running { inner, slot } => {
                    let out = ready!(inner.poll(cx));
                    // The work is done: hand the slot on before the caller even sees the
                    // answer.
                    drop(slot.take());
                    return Poll::Ready(out);
                }
            }
        }
    }
}
