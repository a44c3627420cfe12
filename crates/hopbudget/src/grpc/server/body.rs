use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use http::{HeaderMap, HeaderValue};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::Sleep;

use super::method::{self, Proof};
use crate::codec::marker;
use crate::error::BudgetError;
use crate::grpc::{budget_status, note_answer, status_parts};
use crate::hop::{HopConfig, HopGuard};
use crate::status::GrpcStatusMap;

pin_project! {
    /// Response body of [`GrpcServer`](super::GrpcServer): the handler's body, polled inside
    /// the call's budget scope and hop span, which closes the hop when its trailers go out
    /// (or cancels the request's tree if the client resets the stream first), or an empty
    /// body for a status the layer answered itself.
    ///
    /// A body still running at the deadline is ended with DEADLINE_EXCEEDED trailers and the
    /// handler's stream is dropped. On a stream route ([C13](crate::contract#c13)) the first message moves the
    /// budget, and so this limit, to the profile's stream lifetime.
    ///
    /// See the [module example](super#example).
    pub struct ResponseBody<B> {
        #[pin]
        inner: Option<B>,
        guard: Option<HopGuard>,
        config: Option<Arc<HopConfig>>,
        // The codes of the profile the call arrived under (C24).
        statuses: GrpcStatusMap,
        // Armed only when the body is pending: a unary body that is ready at once pays for
        // no timer.
        #[pin]
        sleep: Option<Sleep>,
        // The head left open whether the called method exists: a message or the trailers
        // will say (C20, see `method`).
        unproved: bool,
    }
}

impl<B> std::fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseBody")
            .field("answered_by_layer", &self.inner.is_none())
            .finish_non_exhaustive()
    }
}

impl<B: Body> ResponseBody<B> {
    pub(super) fn new(
        inner: B,
        mut guard: Option<HopGuard>,
        config: Arc<HopConfig>,
        statuses: GrpcStatusMap,
        unproved: bool,
    ) -> Self {
        // A body already at its end (a trailers-only status) completes the hop now: hyper may
        // never poll it.
        if inner.is_end_stream() {
            if let Some(mut g) = guard.take() {
                g.finish();
            }
        }
        Self {
            inner: Some(inner),
            guard,
            config: Some(config),
            statuses,
            sleep: None,
            unproved,
        }
    }
}

impl<B> ResponseBody<B> {
    pub(super) fn empty() -> Self {
        Self {
            inner: None,
            guard: None,
            config: None,
            statuses: GrpcStatusMap::default(),
            sleep: None,
            unproved: false,
        }
    }
}

impl<B: Body> Body for ResponseBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        let Some(inner) = this.inner.as_mut().as_pin_mut() else {
            return Poll::Ready(None);
        };
        let Some(guard) = this.guard.as_mut() else {
            // The hop is closed: pass the rest through.
            return inner.poll_frame(cx);
        };
        let polled = {
            let _entered = guard.entered();
            inner.poll_frame(cx)
        };
        let frame = match polled {
            Poll::Ready(frame) => frame,
            Poll::Pending => {
                if !guard.budget().is_enforced() {
                    // Unenforced (C24): the body runs to its end, whatever the deadline.
                    return Poll::Pending;
                }
                if this.sleep.is_none() {
                    let until = guard.budget().deadline().instant();
                    this.sleep.set(Some(tokio::time::sleep_until(until)));
                }
                if let Some(sleep) = this.sleep.as_mut().as_pin_mut() {
                    ready!(sleep.poll(cx));
                }
                // The limit passed with the body still running: end it here, dropping the
                // handler's stream (inside its scope) so whatever feeds it stops.
                guard.expired();
                let budget = guard.budget().clone();
                budget.sync_scope(|| this.inner.set(None));
                this.guard.take();
                let mut trailers = HeaderMap::new();
                if this.config.is_some() {
                    let parts = status_parts(budget_status(&BudgetError::Expired, this.statuses));
                    expired_trailers(parts, &mut trailers);
                }
                return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
            }
        };
        match &frame {
            Some(Ok(f)) if f.is_data() => {
                if std::mem::take(this.unproved) {
                    // A message for the call: the method exists (C20).
                    if let Some(config) = this.config.as_ref() {
                        guard.method_answered(config);
                    }
                }
                if guard.stream_lifetime().is_some() && !guard.is_streaming() {
                    // C13: the first message is out; from now on the stream lifetime applies
                    // to the body and to everything working for it.
                    guard.stream_started();
                    this.sleep.set(None);
                }
            }
            Some(Ok(f)) => {
                if let (Some(trailers), Some(config)) = (f.trailers_ref(), this.config.as_ref()) {
                    if std::mem::take(this.unproved) && method::of_status(trailers) == Proof::Proved
                    {
                        guard.method_answered(config);
                    }
                    note_answer(guard, trailers, this.statuses);
                    if let Some(mut g) = this.guard.take() {
                        g.finish();
                    }
                }
            }
            // The end, or a body error of the handler's own (not a deadline outcome).
            None | Some(Err(_)) => {
                if let Some(mut g) = this.guard.take() {
                    g.finish();
                }
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}

/// The trailers of a body the layer ended: `grpc-status` and `grpc-message` as a
/// trailers-only response would carry them, plus the outcome mark.
fn expired_trailers(parts: http::response::Parts, trailers: &mut HeaderMap) {
    for name in ["grpc-status", "grpc-message", marker::OUTCOME] {
        if let Some(v) = parts.headers.get(name) {
            trailers.insert(name, v.clone());
        }
    }
    if !trailers.contains_key("grpc-status") {
        trailers.insert("grpc-status", HeaderValue::from_static("4"));
    }
}
