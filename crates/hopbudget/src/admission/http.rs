//! An HTTP request as the admission layer sees it (feature `http`, [C21](crate::contract#c21)): its deadline from the request's
//! budget (the server layer's, outside), its route from the router's matched pattern (axum's
//! `MatchedPath`, feature `axum`) or else the path.

use super::AdmissionRequest;
use crate::{budget::Deadline, budget::RequestBudget};

impl<B> AdmissionRequest for http::Request<B> {
    #[inline]
    fn deadline(&self) -> Option<Deadline> {
        match self.extensions().get::<RequestBudget>() {
            Some(budget) => Some(budget.deadline()),
            None => RequestBudget::current().map(|b| b.deadline()),
        }
    }

    #[inline]
    fn route(&self) -> Option<&str> {
        #[cfg(feature = "axum")]
        if let Some(matched) = self.extensions().get::<axum::extract::MatchedPath>() {
            return Some(matched.as_str());
        }
        Some(self.uri().path())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::budget::HopPolicy;

    #[test]
    fn the_budget_comes_from_the_extensions_and_the_route_from_the_path() {
        let budget = RequestBudget::local(Duration::from_millis(300), HopPolicy::DEFAULT);
        let mut req = http::Request::get("/orders/7").body(()).unwrap();
        assert_eq!(req.deadline(), None, "no budget anywhere");
        req.extensions_mut().insert(budget.clone());
        assert_eq!(req.deadline(), Some(budget.deadline()));
        assert_eq!(req.route(), Some("/orders/7"));
        // Outside the extensions, the ambient budget.
        let bare = http::Request::get("/").body(()).unwrap();
        assert_eq!(
            budget.sync_scope(|| bare.deadline()),
            Some(budget.deadline())
        );
    }

    #[cfg(feature = "axum")]
    #[tokio::test]
    async fn behind_axum_the_route_is_the_matched_pattern() {
        use tower::ServiceExt;
        let app = axum::Router::new().route(
            "/orders/{id}",
            axum::routing::get(|req: axum::extract::Request| async move {
                req.route().map(str::to_owned).unwrap_or_default()
            }),
        );
        let res = app
            .oneshot(
                http::Request::get("/orders/7")
                    .body(axum::body::Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        let body = http_body_util::BodyExt::collect(res.into_body())
            .await
            .unwrap();
        assert_eq!(body.to_bytes(), "/orders/{id}");
    }
}
