use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use tower_service::Service;

use super::{ResponseBody, ResponseFuture, ServerBudgetLayer, linger};
use crate::answer::http::{http_answer, malformed_answer};
use crate::error::BudgetError;
use crate::hop::{HopConfig, RouteLabel, Verdict, strip_internal_markers};
use crate::macros::define_inner_service_accessors;
use crate::profile::shared::SharedProfile;

/// Middleware that gives each inbound HTTP request its [`RequestBudget`](crate::RequestBudget).
///
/// Made by [`ServerBudgetLayer`]; see the [module docs](super).
///
/// See the [module example](super#example).
#[derive(Clone, Debug)]
pub struct ServerBudget<S> {
    pub(super) inner: S,
    pub(super) config: Arc<HopConfig>,
}

impl<S> ServerBudget<S> {
    /// Wrap `inner` with the behaviour `profile` describes.
    ///
    /// See the [module example](super#example).
    pub fn new(inner: S, profile: impl Into<SharedProfile>) -> Self {
        ServerBudget {
            inner,
            config: ServerBudgetLayer::new(profile).core.config().clone(),
        }
    }

    /// A layer for this middleware.
    ///
    /// See the [module example](super#example).
    pub fn layer(profile: impl Into<SharedProfile>) -> ServerBudgetLayer {
        ServerBudgetLayer::new(profile)
    }

    define_inner_service_accessors!("service", "super#example");
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for ServerBudget<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ReqBody: Body + Send + 'static,
    ResBody: Body<Data = Bytes>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        // The profile in force as the request arrives serves it to its end (C24).
        let profile = self.config.profile();
        let status = profile.http_status();
        // The route as the router knows it (`/users/{id}`) keeps labels bounded (C20); a
        // plain hyper service has only the concrete path, labelled by the profile's rules.
        let path = req.uri().path();
        let route = match matched_path(&req) {
            Some(pattern) => RouteLabel::Matched { pattern, path },
            None => RouteLabel::Path(path),
        };
        match self.config.admit_in(&profile, req.headers(), route) {
            // Early answers, before the body was read: on HTTP/1.1 the unread body is drained
            // so the client reads the answer instead of a reset (C18, S14).
            Verdict::Malformed(malformed) => ResponseFuture::answer(linger::answer_early(
                req,
                malformed_answer(status, &malformed),
            )),
            Verdict::Expired => ResponseFuture::answer(linger::answer_early(
                req,
                http_answer(&BudgetError::Expired, status),
            )),
            Verdict::Refused(refused) => {
                let res = http_answer(&BudgetError::Refused(refused), status);
                ResponseFuture::answer(linger::answer_early(req, res))
            }
            Verdict::Admitted(mut guard) => {
                strip_internal_markers(req.headers_mut());
                req.extensions_mut().insert(guard.budget().clone());
                // A 504 at the deadline may find the handler still waiting for the body (C18).
                let lent = linger::LentBody::lend(&mut req);
                let head_request = req.method() == http::Method::HEAD;
                // Some services do work in `call` itself; give it the scope and span too.
                let future = {
                    let _entered = guard.entered();
                    self.inner.call(req)
                };
                ResponseFuture::running(future, guard, *status, lent, head_request)
            }
        }
    }
}

#[cfg(feature = "axum")]
#[inline]
fn matched_path<B>(req: &Request<B>) -> Option<&str> {
    req.extensions()
        .get::<axum::extract::MatchedPath>()
        .map(axum::extract::MatchedPath::as_str)
}

#[cfg(not(feature = "axum"))]
#[inline]
fn matched_path<B>(_req: &Request<B>) -> Option<&str> {
    None
}
