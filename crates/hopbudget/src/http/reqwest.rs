//! The client side of an HTTP hop for reqwest, as a reqwest-middleware [`Middleware`].
//!
//! [`BudgetMiddleware`] behaves as [`ClientBudgetLayer`](super::client::ClientBudgetLayer)
//! does (see [`client`](super::client)): the budget comes from the request's middleware
//! extensions (`RequestBuilder::with_extension(budget)`), else the task-local scope, else the
//! profile's edge total ([C8](crate::contract#c8)); the forward budget is stamped ([C2](crate::contract#c2)); a call below the threshold
//! fails before any connection ([C3](crate::contract#c3)); the wait is bounded by the forward budget and aborted when
//! the parent ends ([C5](crate::contract#c5), [C7](crate::contract#c7)); a downstream expiry fails the call as expired ([C4](crate::contract#c4)); nothing is
//! retried ([C6](crate::contract#c6)).
//!
//! Beyond the head: the response body is bounded by the same wait, so reading it with
//! `bytes()`, `text()` or `chunk()` fails at the deadline with a body error that
//! [`budget_error`] finds as `Expired` (or `Cancelled`) instead of waiting for a server that
//! trickles ([C4](crate::contract#c4), [C5](crate::contract#c5)). A per-call `RequestBuilder::timeout` (or a hand-set carrier header)
//! combines with the budget as the minimum of the two ([C16](crate::contract#c16)): the callee is told the tighter
//! value and the wait ends with it, reported as `Expired`. Deadline headers go only to trusted
//! hosts ([C19](crate::contract#c19), [S16](crate::contract#s16); see [`BudgetMiddleware::untrusted`]).
//!
//! Deadline failures are `reqwest_middleware::Error::Middleware` wrapping a
//! [`BudgetError`]; [`BudgetError::find`] (or [`budget_error`]) finds it, and
//! [`DownstreamError`] hands it on from a handler with `?`.
//!
//! # Example
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use hopbudget::http::reqwest::BudgetMiddleware;
//! use hopbudget::{BudgetError, Profile};
//!
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(BudgetMiddleware::new(Profile::default()))
//!     .build();
//! // Inside a handler behind `ServerBudgetLayer` the ambient budget is used; here, outside any
//! // request, the profile's edge total is (C8).
//! match client.get("http://127.0.0.1:8080/tax").send().await {
//!     Ok(res) => println!("{}", res.status()),
//!     Err(e) if BudgetError::find(&e) == Some(&BudgetError::Expired) => println!("out of time"),
//!     Err(e) => return Err(e.into()),
//! }
//!
//! // A client for a third-party API sends no deadline header (C19, S16); one that only ever
//! // calls internal services may send it everywhere with `trust_all()`.
//! let payments = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(BudgetMiddleware::new(Profile::default()).untrusted())
//!     .build();
//! let internal = BudgetMiddleware::new(Profile::default()).trust_all();
//! assert_eq!(internal.profile().service(), Profile::default().service());
//! # let _ = payments;
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;
use std::time::Duration;

use http::Extensions;
use reqwest::ResponseBuilderExt;
use reqwest_middleware::{Error, Middleware, Next, Result};

use super::client::ResponseBody;
use crate::hop::outbound::{Bound, Shared, host_header, reply_error};
use crate::macros::define_trust_builders;
use crate::{
    budget::RequestBudget, downstream::DownstreamError, error::BudgetError,
    profile::shared::SharedProfile,
};

/// reqwest-middleware [`Middleware`] that carries the request budget onto outbound calls.
///
/// See the [module example](crate::http::reqwest#example).
#[derive(Clone, Debug)]
pub struct BudgetMiddleware {
    shared: Arc<Shared>,
}

impl BudgetMiddleware {
    /// Middleware following `profile`.
    ///
    /// See the [module example](crate::http::reqwest#example).
    pub fn new(profile: impl Into<SharedProfile>) -> Self {
        Self {
            shared: Shared::new(profile),
        }
    }

    define_trust_builders!(
        "middleware",
        "the deadline header",
        "crate::http::reqwest#example"
    );
}

/// The deadline outcome inside a reqwest-middleware error, if that is what it is.
///
/// See the [module example](crate::http::reqwest#example).
pub fn budget_error(error: &Error) -> Option<&BudgetError> {
    match error {
        Error::Middleware(e) => e
            .downcast_ref::<BudgetError>()
            .or_else(|| e.chain().find_map(|c| c.downcast_ref::<BudgetError>())),
        Error::Reqwest(e) => BudgetError::find(e),
    }
}

/// A deadline outcome as a reqwest-middleware error.
///
/// `reqwest_middleware::Error` is `#[error(transparent)]` over an `anyhow::Error`, so its
/// `source()` is the *source of* the error inside, never that error itself: a `BudgetError`
/// put there directly would be skipped by a plain walk of the chain. [`Reported`] puts it one
/// step down, where [`BudgetError::find`] (a plain walk, naming no integration) reaches it.
fn budget_failure(error: BudgetError) -> Error {
    Error::middleware(Reported(error))
}

/// A [`BudgetError`] reported through reqwest-middleware; see [`budget_failure`].
#[derive(Debug)]
struct Reported(BudgetError);

impl std::fmt::Display for Reported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Reported {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

impl From<Error> for DownstreamError {
    /// A reqwest call's error: the deadline outcome [`BudgetMiddleware`] reported
    /// ([`BudgetError::find`]), else a transport failure.
    fn from(e: Error) -> Self {
        // `budget_error`, not `BudgetError::find`: a refusal the middleware made itself is
        // the anyhow error inside, which `source()` never yields (see `Reported`).
        match budget_error(&e) {
            Some(b) => DownstreamError::from(*b),
            None => DownstreamError::transport(Box::new(e)),
        }
    }
}

impl From<reqwest::Error> for DownstreamError {
    /// A plain reqwest error, such as reading a body with `text()` after a call went through
    /// the middleware: a transport failure, unless a [`BudgetError`] is in its chain.
    fn from(e: reqwest::Error) -> Self {
        match (BudgetError::find(&e), e.status()) {
            (Some(b), _) => DownstreamError::from(*b),
            // `error_for_status()`: the downstream answered, and its answer keeps its meaning.
            (None, Some(status)) => {
                DownstreamError::http_answer(status, e.without_url().to_string())
            }
            (None, None) => DownstreamError::transport(Box::new(e)),
        }
    }
}

/// The tighter of the per-call values the application set: `RequestBuilder::timeout` and a
/// hand-set carrier header ([C16](crate::contract#c16)).
fn per_call(shared: &Shared, req: &reqwest::Request) -> Option<Duration> {
    let hand_set = shared.hand_set_http(req.headers());
    match (req.timeout().copied(), hand_set) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[async_trait::async_trait]
impl Middleware for BudgetMiddleware {
    async fn handle(
        &self,
        mut req: reqwest::Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Result<reqwest::Response> {
        let per_call = per_call(&self.shared, &req);
        // C19: the URL's host is where the call goes, through a forward proxy too (reqwest
        // applies `Proxy` below the middleware and keeps the destination in the URL); a `Host`
        // header set by hand is judged as well.
        let host = req.url().host_str().map(str::to_owned);
        let host_header = host_header(req.headers()).map(str::to_owned);
        // C3: no connection, no bytes for a refused call.
        let call = self
            .shared
            .plan(
                extensions.get::<RequestBudget>(),
                per_call,
                host.as_deref(),
                host_header.as_deref(),
            )
            // Through `Reported`, like every other outcome here, so `BudgetError::find` sees it.
            .map_err(budget_failure)?;
        self.shared.stamp_http(req.headers_mut(), &call);
        // The callee's hop span continues this trace (feature `otel`).
        #[cfg(feature = "otel")]
        crate::observe::propagation::inject_current(req.headers_mut());
        let mut bound = Bound::new(&call);
        let res = {
            let send = next.run(req, extensions);
            tokio::pin!(send);
            std::future::poll_fn(|cx| {
                if let std::task::Poll::Ready(res) = send.as_mut().poll(cx) {
                    return std::task::Poll::Ready(Ok(res));
                }
                bound.poll_over(cx).map(Err)
            })
            .await
        };
        let res = match res {
            Ok(res) => res.map_err(|e| expiry_of_timeout(e, &bound))?,
            Err(error) => return Err(budget_failure(error)),
        };
        if let Some(error) = reply_error(
            &self.shared.status(),
            res.status().as_u16(),
            res.headers(),
            bound.budget(),
            bound.told(),
        ) {
            return Err(budget_failure(error));
        }
        Ok(bounded(res, bound))
    }
}

/// reqwest's own timer (the per-call `timeout`, which the wait normally beats by the hop
/// margin) is the call's deadline too: report it as expired ([C4](crate::contract#c4)), not as a transport error.
fn expiry_of_timeout(error: Error, bound: &Bound) -> Error {
    match &error {
        Error::Reqwest(e) if e.is_timeout() && bound.budget().is_done() => {
            budget_failure(BudgetError::Expired)
        }
        _ => error,
    }
}

/// The response with its body bounded by the call's wait, keeping its URL.
fn bounded(res: reqwest::Response, bound: Bound) -> reqwest::Response {
    let url = res.url().clone();
    let (mut parts, body) = http::Response::<reqwest::Body>::from(res).into_parts();
    // `From<http::Response>` reads the URL from an extension only reqwest's builder can set.
    if let Ok(carrier) = http::Response::builder().url(url).body(()) {
        parts.extensions.extend(carrier.into_parts().0.extensions);
    }
    let body = reqwest::Body::wrap(ResponseBody::new(body, bound));
    reqwest::Response::from(http::Response::from_parts(parts, body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Profile;

    #[test]
    fn a_plain_walk_of_the_chain_finds_the_outcome_the_middleware_reported() {
        let err = budget_failure(BudgetError::Expired);
        assert_eq!(BudgetError::find(&err), Some(&BudgetError::Expired));
        assert_eq!(budget_error(&err), Some(&BudgetError::Expired));
        assert_eq!(err.to_string(), "deadline expired");
        let err = budget_failure(BudgetError::Cancelled);
        assert_eq!(
            DownstreamError::from(err).budget_error(),
            Some(&BudgetError::Cancelled)
        );
    }

    /// A call refused before it starts (C3) is found by a plain walk too, and converts to a
    /// refusal, not a transport failure: a handler's `?` answers 503 with `Retry-After`.
    #[tokio::test]
    async fn a_call_refused_before_it_starts_is_a_refusal_downstream() {
        let profile = Profile::default();
        let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
            .with(BudgetMiddleware::new(profile.clone()))
            .build();
        let budget = RequestBudget::local(std::time::Duration::from_millis(5), profile.policy());
        // Port 9 (discard) is never reached: the refusal comes before any connection.
        let err = budget
            .scope(client.get("http://127.0.0.1:9/").send())
            .await
            .unwrap_err();
        assert!(
            matches!(BudgetError::find(&err), Some(BudgetError::Refused(_))),
            "{err}"
        );
        let downstream = DownstreamError::from(err);
        assert!(
            matches!(downstream.budget_error(), Some(BudgetError::Refused(_))),
            "{downstream}"
        );
    }
}
