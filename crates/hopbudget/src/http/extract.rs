//! The axum extractor for [`RequestBudget`]: a handler takes `budget: RequestBudget` and gets
//! the budget that [`ServerBudgetLayer`](super::server::ServerBudgetLayer) installed.

use std::fmt;

use axum::extract::FromRequestParts;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::request::Parts;

use crate::budget::RequestBudget;

/// Rejection of the [`RequestBudget`] extractor: the request carries no budget, which means
/// the server layer is not installed in front of this handler.
///
/// See the [server layer example](crate::http::server#example), whose handler reads the budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MissingBudget(());

impl fmt::Display for MissingBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "no RequestBudget in the request extensions: add \
             `.layer(hopbudget::http::server::ServerBudgetLayer::new(profile))` to the router",
        )
    }
}

impl std::error::Error for MissingBudget {}

impl IntoResponse for MissingBudget {
    fn into_response(self) -> Response {
        // A server wiring mistake, not the client's fault.
        (StatusCode::INTERNAL_SERVER_ERROR, self.to_string()).into_response()
    }
}

impl<S: Send + Sync> FromRequestParts<S> for RequestBudget {
    type Rejection = MissingBudget;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<RequestBudget>()
            .cloned()
            .ok_or(MissingBudget(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{budget::HopPolicy, budget::RequestBudget};
    use std::time::Duration;

    #[tokio::test]
    async fn extracts_the_installed_budget_and_says_when_the_layer_is_missing() {
        let (mut parts, ()) = http::Request::new(()).into_parts();
        let err = RequestBudget::from_request_parts(&mut parts, &())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("ServerBudgetLayer"), "{err}");
        assert_eq!(
            err.into_response().status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );

        let budget = RequestBudget::local(Duration::from_secs(1), HopPolicy::DEFAULT);
        parts.extensions.insert(budget.clone());
        let got = RequestBudget::from_request_parts(&mut parts, &())
            .await
            .unwrap();
        assert!(got.ptr_eq(&budget));
    }
}
