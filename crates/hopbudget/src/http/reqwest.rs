//! The client side of an HTTP hop for reqwest, as a reqwest-middleware [`Middleware`].
//!
//! [`BudgetMiddleware`] behaves as [`ClientBudgetLayer`](super::client::ClientBudgetLayer)
//! does (see [`client`](super::client)): the budget comes from the request's middleware
//! extensions (`RequestBuilder::with_extension(budget)`), else the task-local scope, else the
//! profile's edge total (C8); the forward budget is stamped (C2); a call below the threshold
//! fails before any connection (C3); the wait is bounded by the forward budget and aborted when
//! the parent ends (C5, C7); a downstream expiry fails the call as expired (C4); nothing is
//! retried (C6).
//!
//! Deadline failures are `reqwest_middleware::Error::Middleware` wrapping a
//! [`BudgetError`]; [`budget_error`] finds it.
//!
//! # Example
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use hopbudget::http::reqwest::{BudgetMiddleware, budget_error};
//! use hopbudget::{BudgetError, Profile};
//!
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(BudgetMiddleware::new(Profile::default()))
//!     .build();
//! // Inside a handler behind `ServerBudgetLayer` the ambient budget is used; here, outside any
//! // request, the profile's edge total is (C8).
//! match client.get("http://127.0.0.1:8080/tax").send().await {
//!     Ok(res) => println!("{}", res.status()),
//!     Err(e) if budget_error(&e) == Some(&BudgetError::Expired) => println!("out of time"),
//!     Err(e) => return Err(e.into()),
//! }
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;

use http::Extensions;
use reqwest_middleware::{Error, Middleware, Next, Result};

use super::client::{Shared, ended, reply_error};
use crate::{BudgetError, Profile, RequestBudget};

/// reqwest-middleware [`Middleware`] that carries the request budget onto outbound calls.
#[derive(Clone, Debug)]
pub struct BudgetMiddleware {
    shared: Arc<Shared>,
}

impl BudgetMiddleware {
    /// Middleware following `profile`.
    pub fn new(profile: Profile) -> Self {
        Self {
            shared: Shared::new(profile),
        }
    }
}

/// The deadline outcome inside a reqwest-middleware error, if that is what it is.
pub fn budget_error(error: &Error) -> Option<&BudgetError> {
    match error {
        Error::Middleware(e) => e
            .downcast_ref::<BudgetError>()
            .or_else(|| e.chain().find_map(|c| c.downcast_ref::<BudgetError>())),
        Error::Reqwest(e) => BudgetError::find(e),
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
        let budget = self.shared.budget_for(extensions.get::<RequestBudget>());
        // C3: no connection, no bytes for a refused call.
        let forward = budget.admit_forward().map_err(Error::middleware)?;
        self.shared.stamp(req.headers_mut(), forward);
        // The callee's hop span continues this trace (feature `otel`).
        #[cfg(feature = "otel")]
        crate::observe::propagation::inject_current(req.headers_mut());
        let wait_until = budget.deadline().saturating_sub(budget.policy().hop_margin);
        let token = budget.token();
        let res = tokio::select! {
            biased;
            () = token.cancelled() => return Err(Error::middleware(ended(&budget))),
            () = tokio::time::sleep_until(wait_until.instant()) => {
                return Err(Error::middleware(BudgetError::Expired));
            }
            res = next.run(req, extensions) => res?,
        };
        match reply_error(self.shared.status(), res.status().as_u16(), res.headers()) {
            Some(error) => Err(Error::middleware(error)),
            None => Ok(res),
        }
    }
}
