use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body::Body;
use tower_service::Service;

use super::layer::Shared;
use super::linger;
use super::{ResponseBody, ResponseFuture, ServerBudgetLayer};
use crate::clock::SystemClock;
use crate::codec::{millis, read_inbound};
use crate::observe::{self, Hop, HopLabels, Protocol};
use crate::status::Outcome;
use crate::{Deadline, Profile, RequestBudget, Source};

/// Middleware that gives each inbound HTTP request its [`RequestBudget`].
///
/// Made by [`ServerBudgetLayer`]; see the [module docs](super).
#[derive(Clone, Debug)]
pub struct ServerBudget<S> {
    pub(super) inner: S,
    pub(super) shared: Arc<Shared>,
}

impl<S> ServerBudget<S> {
    /// Wrap `inner` with the behaviour `profile` describes.
    pub fn new(inner: S, profile: Profile) -> Self {
        ServerBudget {
            inner,
            shared: ServerBudgetLayer::new(profile).shared,
        }
    }

    /// A layer for this middleware.
    pub fn layer(profile: Profile) -> ServerBudgetLayer {
        ServerBudgetLayer::new(profile)
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwrap the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
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
        let shared = &*self.shared;
        let profile = &shared.profile;
        let status = *profile.http_status();

        // The route as the router knows it (`/users/{id}`) keeps labels low-cardinality; the
        // concrete path is the fallback for plain hyper services.
        let uri_path = req.uri().path();
        let route = matched_path(&req).unwrap_or(uri_path);
        let rule = match profile.route(route) {
            None if route != uri_path => profile.route(uri_path),
            rule => rule,
        };
        let min_budget = rule.map_or(profile.policy().refuse_below, |r| r.min_budget);
        let stream = rule.is_some_and(|r| r.mode == crate::profile::RouteMode::Stream);
        let labels = HopLabels::for_route(&shared.service, route, Protocol::Http)
            .with_low_budget(profile.low_budget());

        let inbound = match read_inbound(
            req.headers(),
            profile.inbound(),
            profile.max(),
            &SystemClock,
        ) {
            Ok(inbound) => inbound,
            Err(malformed) => {
                // C9: a clear client error, never "no deadline".
                observe::malformed_header(&labels, malformed.header().as_str());
                let mut res = plain(status.malformed, malformed.to_string());
                res.headers_mut().insert(
                    super::super::OUTCOME_HEADER.clone(),
                    HeaderValue::from_static("malformed"),
                );
                return ResponseFuture::answer(linger::answer_early(req, res));
            }
        };
        let policy = profile.policy();
        let budget = match inbound {
            Some(inbound) => {
                if inbound.clamped {
                    tracing::debug!(
                        carrier = inbound.carrier.name(),
                        max_ms = profile.max().as_millis() as u64,
                        "inbound budget clamped to the profile maximum"
                    );
                }
                RequestBudget::from_carrier(inbound.carrier, inbound.budget, policy)
            }
            None => RequestBudget::new(
                Deadline::after(profile.edge_total()),
                Source::Fallback,
                policy,
            ),
        };
        let hop = Hop::start(&labels, &budget);

        // The budget was created a moment ago from this very value: no second clock read.
        let remaining = budget.at_arrival();
        if remaining.is_zero() {
            // C9: zero or negative budgets are already expired.
            budget.expire();
            hop.finish(Outcome::Expired);
            return ResponseFuture::answer(linger::answer_early(req, expired_response(&status)));
        }
        if remaining < min_budget {
            // C3: refuse before the handler is entered.
            hop.refuse(min_budget);
            let res = refused_response(&status, min_budget, remaining);
            return ResponseFuture::answer(linger::answer_early(req, res));
        }

        req.extensions_mut().insert(budget.clone());
        let future = {
            let _entered = hop.span().enter();
            budget.sync_scope(|| self.inner.call(req))
        };
        let stream_lifetime = stream.then(|| profile.stream_lifetime());
        ResponseFuture::running(future, budget, hop, status, stream_lifetime)
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

/// A plain-text response with a status from the profile. The profile validates its codes, so
/// the fallback to 500 only guards against a hand-built invalid map.
pub(super) fn plain(code: u16, text: String) -> Response<Bytes> {
    let mut res = Response::new(Bytes::from(text));
    *res.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    res.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    res
}

pub(super) fn expired_response(status: &crate::status::HttpStatusMap) -> Response<Bytes> {
    let mut res = plain(status.expired, "deadline expired\n".to_owned());
    res.headers_mut().insert(
        super::super::OUTCOME_HEADER.clone(),
        HeaderValue::from_static("expired"),
    );
    res
}

fn refused_response(
    status: &crate::status::HttpStatusMap,
    required: std::time::Duration,
    remaining: std::time::Duration,
) -> Response<Bytes> {
    let refused = crate::Refused::new(required, remaining);
    let mut res = plain(status.refused, format!("{refused}\n"));
    let headers = res.headers_mut();
    headers.insert(http::header::RETRY_AFTER, HeaderValue::from_static("0"));
    headers.insert(
        super::super::OUTCOME_HEADER.clone(),
        HeaderValue::from_static("refused"),
    );
    headers.insert(
        super::super::REQUIRED_HEADER.clone(),
        millis::encode(required).to_header_value(),
    );
    headers.insert(
        super::super::REMAINING_HEADER.clone(),
        millis::encode(remaining).to_header_value(),
    );
    res
}
