use std::sync::Arc;
use std::task::{Context, Poll};

use http::header::HeaderName;
use http::{Request, Response};
use tower_service::Service;

use super::future::ResponseFuture;
use super::{GrpcClientLayer, ResponseBody};
use crate::budget::RequestBudget;
use crate::codec::Carrier;
use crate::grpc::{budget_status, status_parts};
use crate::hop::outbound::{Bound, Shared, host_header};
use crate::macros::define_inner_service_accessors;
use crate::profile::shared::SharedProfile;
use tower::BoxError;

const GRPC_TIMEOUT: HeaderName = HeaderName::from_static(crate::codec::GRPC_TIMEOUT);

/// Middleware that forwards the current budget on every gRPC call. See the
/// [module docs](super).
///
/// See the [module example](super#example).
#[derive(Clone, Debug)]
pub struct GrpcClient<S> {
    pub(super) inner: S,
    pub(super) shared: Arc<Shared>,
}

impl<S> GrpcClient<S> {
    /// Wrap `inner` with the behaviour `profile` describes.
    ///
    /// See the [module example](super#example).
    pub fn new(inner: S, profile: impl Into<SharedProfile>) -> Self {
        Self {
            inner,
            shared: GrpcClientLayer::new(profile).shared,
        }
    }

    /// A layer for this middleware.
    ///
    /// See the [module example](super#example).
    pub fn layer(profile: impl Into<SharedProfile>) -> GrpcClientLayer {
        GrpcClientLayer::new(profile)
    }

    define_inner_service_accessors!("service", "super#example");
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for GrpcClient<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        let shared = &self.shared;
        // C16: tonic's `Request::set_timeout` (or a hand-set value) is already in
        // `grpc-timeout`; it narrows the call and never widens the budget. A value that does
        // not parse is replaced, not trusted.
        let per_call = req
            .headers()
            .get(&GRPC_TIMEOUT)
            .and_then(|v| Carrier::GrpcTimeout.decode(v.as_bytes(), || 0).ok());
        // The explicit budget, else the ambient one, else the edge total, counted and logged
        // as the HTTP client does (C8); then C3: below the threshold nothing is sent, not even
        // a connection attempt.
        // C19: trust is judged on every host the call names: the destination the layer was
        // built for (a tonic channel's endpoint; its requests carry only the method path), the
        // URI's host (a client made `with_origin`), a `host` entry; none named: the profile's
        // `outbound.unknown_destination`.
        let call = match shared.plan(
            req.extensions().get::<RequestBudget>(),
            per_call,
            req.uri().host(),
            host_header(req.headers()),
        ) {
            Ok(call) => call,
            Err(err) => {
                return ResponseFuture::answer(status_parts(budget_status(
                    &err,
                    shared.profile.current().grpc_status(),
                )));
            }
        };
        if call.trusted {
            // C2: stamp what the downstream may use, replacing whatever the caller set (the
            // tighter value already: C16).
            req.headers_mut().insert(
                GRPC_TIMEOUT,
                Carrier::GrpcTimeout
                    .encode(call.forward, || 0)
                    .to_header_value(),
            );
        } else {
            // C19, S16: a third party learns nothing of our deadlines.
            shared.strip(req.headers_mut());
        }
        // The callee's hop span continues this trace (feature `otel`).
        #[cfg(feature = "otel")]
        crate::observe::propagation::inject_current(req.headers_mut());
        let bound = Bound::new(&call);
        ResponseFuture::waiting(
            self.inner.call(req),
            bound,
            call.budget,
            call.told,
            shared.clone(),
        )
    }
}
