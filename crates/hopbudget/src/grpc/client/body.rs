use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::HeaderValue;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::future::Watch;
use crate::status::{GrpcCode, Outcome, REFUSED_METADATA};

/// Rewrite a CANCELLED that arrived after the deadline as DEADLINE_EXCEEDED (rule C4).
pub(super) fn relabel_late_cancel(headers: &mut http::HeaderMap, watch: &Watch) {
    if crate::grpc::grpc_status_of(headers) != Some(GrpcCode::Cancelled.as_i32())
        || !watch.is_past_deadline()
    {
        return;
    }
    let code = watch.profile.grpc_status().expired.as_i32();
    let code = crate::codec::Decimal::new(u64::try_from(code).unwrap_or(4));
    headers.insert("grpc-status", code.to_header_value());
    headers.insert(
        "grpc-message",
        HeaderValue::from_static(
            "deadline exceeded (the peer reported CANCELLED after the deadline)",
        ),
    );
    headers.insert(
        REFUSED_METADATA,
        HeaderValue::from_static(Outcome::Expired.as_str()),
    );
}

pin_project! {
    /// Response body of [`GrpcClient`](super::GrpcClient): the downstream's body with a late
    /// CANCELLED in its trailers relabelled as DEADLINE_EXCEEDED, or an empty body for a
    /// status the layer answered itself.
    ///
    /// See the [module example](super#example).
    pub struct ResponseBody<B> {
        #[pin]
        inner: Option<B>,
        watch: Option<Watch>,
    }
}

impl<B> std::fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseBody")
            .field("answered_by_layer", &self.inner.is_none())
            .finish_non_exhaustive()
    }
}

impl<B> ResponseBody<B> {
    pub(super) fn new(inner: B, watch: Watch) -> Self {
        Self {
            inner: Some(inner),
            watch: Some(watch),
        }
    }

    pub(super) fn empty() -> Self {
        Self {
            inner: None,
            watch: None,
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
        let this = self.project();
        let Some(inner) = this.inner.as_pin_mut() else {
            return Poll::Ready(None);
        };
        let mut frame = ready!(inner.poll_frame(cx));
        if let (Some(Ok(f)), Some(watch)) = (frame.as_mut(), this.watch.as_ref()) {
            if let Some(trailers) = f.trailers_mut() {
                relabel_late_cancel(trailers, watch);
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
