use std::sync::Arc;
use std::task::{Context, Poll};

use tower::Service;

use super::layer::Shared;
use super::queue::Admit;
use super::{AdmissionRequest, HttpAnswer, RefusalAnswer, ResponseFuture};
use crate::macros::define_inner_service_accessors;

/// Middleware that lets at most `limit` requests do their work at once and queues the rest
/// by deadline, dropping each waiter the moment its budget can no longer cover its route's
/// cost ([C21](crate::contract#c21)).
///
/// Made by [`AdmissionLayer`](super::AdmissionLayer); see the [module docs](super).
///
/// See the [module example](crate::admission#example).
#[derive(Debug)]
pub struct Admission<S, A = HttpAnswer> {
    pub(super) inner: S,
    pub(super) shared: Arc<Shared<A>>,
}

impl<S: Clone, A> Clone for Admission<S, A> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<S, A> Admission<S, A> {
    define_inner_service_accessors!("service", "crate::admission#example");
}

impl<S, A, Req> Service<Req> for Admission<S, A>
where
    S: Service<Req> + Clone,
    Req: AdmissionRequest,
    A: RefusalAnswer<S::Response, S::Error>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S, Req, A>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let shared = &*self.shared;
        let deadline = req.deadline();
        let cost = shared.config.cost_for(req.route());
        match shared.queue.admit(deadline, cost) {
            // A free slot: the service this `poll_ready` readied does the work at once.
            Admit::Granted(slot) => ResponseFuture::running(self.inner.call(req), slot),
            Admit::Refused(error) => ResponseFuture::answer(shared.answer.answer(error)),
            Admit::Queued(waiter) => {
                // The readied service waits with the request; this handle keeps a fresh
                // clone, as `tower::buffer` and axum's routes do.
                let clone = self.inner.clone();
                let ready = std::mem::replace(&mut self.inner, clone);
                ResponseFuture::waiting(waiter, ready, req, self.shared.clone())
            }
        }
    }
}
