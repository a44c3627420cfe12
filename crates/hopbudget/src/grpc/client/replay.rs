//! Retrying a unary gRPC call through tower (rule [C6](crate::contract#c6)): the request body kept so a retry can
//! send it again.
//!
//! `tower::retry` clones the request for every attempt, and a tonic request's body
//! (`tonic::body::Body`) cannot be cloned. [`ReplayLayer`] reads it once (a unary call's body is
//! one message) into a [`ReplayBody`], which can; the layers below it see
//! `http::Request<ReplayBody>`, and [`into_tonic`] turns it back into what a tonic `Channel`
//! takes, just above the channel. See the example on [`GrpcReplies`](super::GrpcReplies#examples).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Request};
use http_body::{Body, Frame, SizeHint};
use tower::BoxError;
use tower_layer::Layer;
use tower_service::Service;

/// A request body read in full, cheap to clone: a unary call's message and its trailers.
///
/// See the example on [`GrpcReplies`](super::GrpcReplies#examples).
#[derive(Clone, Debug, Default)]
pub struct ReplayBody {
    data: Option<Bytes>,
    trailers: Option<HeaderMap>,
}

impl Body for ReplayBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(data) = self.data.take() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.data.as_ref().map_or(0, |d| d.len() as u64))
    }
}

/// A request with a [`ReplayBody`] as a tonic `Channel` takes it: put it just above the
/// channel, `ServiceBuilder::new().map_request(into_tonic).service(channel)`.
///
/// See the example on [`GrpcReplies`](super::GrpcReplies#examples).
pub fn into_tonic(req: Request<ReplayBody>) -> Request<tonic::body::Body> {
    req.map(tonic::body::Body::new)
}

/// Reads each request's body into a [`ReplayBody`] before calling the service below, so a
/// `tower::retry` layer below it can clone the request. For unary calls: a streaming request
/// would be read to its end before anything is sent.
///
/// See the example on [`GrpcReplies`](super::GrpcReplies#examples).
#[derive(Clone, Copy, Debug, Default)]
pub struct ReplayLayer;

impl<S> Layer<S> for ReplayLayer {
    type Service = Replay<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Replay { inner }
    }
}

/// Middleware made by [`ReplayLayer`].
///
/// See the example on [`GrpcReplies`](super::GrpcReplies#examples).
#[derive(Clone, Debug)]
pub struct Replay<S> {
    inner: S,
}

impl<S, B> Service<Request<B>> for Replay<S>
where
    S: Service<Request<ReplayBody>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        // The service that was made ready serves this call; a fresh clone stays for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        // Keep the ambient budget for the body read and for every attempt below (C11).
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let body = read_all(body).await?;
            inner
                .call(Request::from_parts(parts, body))
                .await
                .map_err(Into::into)
        })
    }
}

async fn read_all<B>(body: B) -> Result<ReplayBody, BoxError>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    let mut body = std::pin::pin!(body);
    let mut data = BytesMut::new();
    let mut trailers = None;
    while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        let frame = frame.map_err(Into::into)?;
        match frame.into_data() {
            Ok(mut chunk) => {
                while bytes::Buf::has_remaining(&chunk) {
                    let piece = bytes::Buf::chunk(&chunk);
                    data.extend_from_slice(piece);
                    let n = piece.len();
                    bytes::Buf::advance(&mut chunk, n);
                }
            }
            Err(frame) => trailers = frame.into_trailers().ok(),
        }
    }
    Ok(ReplayBody {
        data: (!data.is_empty()).then(|| data.freeze()),
        trailers,
    })
}
