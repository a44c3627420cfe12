//! The server side of an HTTP hop: one [`RequestBudget`](crate::RequestBudget) per inbound
//! request, and the deadline enforced around the handler.
//!
//! [`ServerBudgetLayer`] does, per request:
//!
//! 1. Reads every inbound carrier the profile enables; the tightest wins, clamped to the
//!    profile maximum ([C1](crate::contract#c1), [C9](crate::contract#c9)). No carrier: the profile's edge total, counted and logged as
//!    `deadline received: none` ([C8](crate::contract#c8)). A malformed header: the profile's `malformed` status
//!    (400) with a plain-text body naming the header and the reason; the handler is not
//!    entered ([C9](crate::contract#c9)).
//! 2. Refuses before the handler when the remaining budget is below the route's minimum
//!    (`routes[].min_budget_ms`, else `refuse_below_ms`): the `refused` status (503) with
//!    `Retry-After: 0`, `x-deadline-required-ms` and `x-deadline-remaining-ms` ([C3](crate::contract#c3)). A budget
//!    already at zero gets the `expired` status (504). Over HTTP/1.x these early answers
//!    carry `Connection: close` and the unread request body is drained in the background, so
//!    a client still writing it gets the answer, not a reset ([C18](crate::contract#c18), [S14](crate::contract#s14)).
//! 3. Puts the budget in the request extensions and in the task-local scope
//!    ([`RequestBudget::current`](crate::RequestBudget::current)), and runs every poll of the
//!    handler *and of its response body* inside the budget's scope and the hop's tracing span
//!    ([`observe::Hop`](crate::observe::Hop), [C14](crate::contract#c14)). Forged `x-deadline-*` markers on the
//!    request are removed first ([C19](crate::contract#c19)).
//! 4. Bounds the handler by the deadline. At expiry it marks the budget expired (which cancels
//!    every child budget, spawned task and outbound call), drops the handler and answers with
//!    the `expired` status (504) ([C4](crate::contract#c4), [C7](crate::contract#c7)). Like `tower::timeout::Timeout`, it registers a timer
//!    only once the handler has returned `Pending`. Where the request body is axum's own
//!    (behind axum's router with `Router::layer`, or around the whole router served by
//!    `axum::serve`) the handler reads it through the layer, so a 504 sent while the handler
//!    was still waiting for the body drains the rest of it as in 2. ([C18](crate::contract#c18)); with another body
//!    type (hyper's `Incoming`, served by hyper directly) the body goes with the handler.
//! 5. If the client goes away first (hyper drops the response future or body), the budget is
//!    cancelled and the hop recorded as its end cause: `cancelled`, or `expired` if the
//!    deadline had already passed ([C4](crate::contract#c4), [C5](crate::contract#c5)).
//! 6. The hop ends when the response body has gone out. Its outcome is the answer's own when
//!    the handler answered with the profile's expired (504), refused (503 with
//!    `x-deadline-required-ms`) or cancelled (499) status ([C17](crate::contract#c17)); an answer completed after the
//!    deadline is late work and `expired`. Then the request's non-detached work is ended, as
//!    Go cancels a request's context when its handler returns. "Gone out" counts what hyper
//!    and axum do: they drop a body delivered in full without polling it to its end, so an
//!    answer to `HEAD`, a 1xx, 204 or 304 is complete with its head, and a body with a
//!    `Content-Length` (or an exact size hint) once its last byte is handed over; only a body
//!    dropped with bytes still to send is `cancelled`. A service that returns `Err` sends no
//!    answer: `cancelled`, or `expired` past the deadline, never `completed`. On request routes the deadline
//!    bounds the handler up to the response head; a body the handler streams afterwards is not
//!    cut off by the layer.
//! 7. Streaming routes (`mode: stream`, [C13](crate::contract#c13)): the deadline covers the time to the first body
//!    frame, which the layer waits for before sending the head (so an expiry can still be a
//!    504). After that the budget itself moves to `stream_lifetime_ms`: the body, the tasks
//!    feeding it and the calls they make are no longer ended by the request deadline ([S12](crate::contract#s12)).
//!
//! The admission and outcome rules live once in [`hop`](crate::hop), shared with
//! the gRPC layer and the queue consumer; this module only spells them in HTTP.
//!
//! The layer answers with responses, never errors: the inner error type is kept, as in
//! tower-http's timeout middleware. The route used for the minimum and the metric label is
//! axum's `MatchedPath` when present (feature `axum`; apply the layer with `Router::layer`),
//! else the profile rule matching the path, else `other` ([C20](crate::contract#c20)).
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use std::convert::Infallible;
//! use bytes::Bytes;
//! use http::{Request, Response};
//! use http_body_util::{BodyExt, Full};
//! use hopbudget::{Profile, RequestBudget};
//! use hopbudget::http::server::ServerBudgetLayer;
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! let profile = Profile::from_yaml("routes: [{path: /tax, min_budget_ms: 200}]", "inline")?;
//! let service = ServiceBuilder::new()
//!     .layer(ServerBudgetLayer::new(profile))
//!     .service_fn(|req: Request<Full<Bytes>>| async move {
//!         // The budget is in the extensions and in the task-local scope.
//!         let budget = req.extensions().get::<RequestBudget>().cloned();
//!         assert!(budget.is_some() && RequestBudget::current().is_some());
//!         Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("ok"))))
//!     });
//!
//! // 120 ms left, the route needs 200 ms: refused before the handler runs (C3, S2).
//! let req = Request::get("/tax")
//!     .header("x-request-timeout-ms", "120")
//!     .body(Full::new(Bytes::new()))?;
//! let res = service.clone().oneshot(req).await?;
//! assert_eq!(res.status(), 503);
//! assert_eq!(res.headers()["x-deadline-required-ms"], "200");
//! assert_eq!(res.headers()["retry-after"], "0");
//!
//! // A malformed header is a clear client error naming the header (C9).
//! let req = Request::get("/tax")
//!     .header("x-request-timeout-ms", "soon")
//!     .body(Full::new(Bytes::new()))?;
//! let res = service.clone().oneshot(req).await?;
//! assert_eq!(res.status(), 400);
//! let text = res.into_body().collect().await?.to_bytes();
//! assert!(std::str::from_utf8(&text)?.contains("x-request-timeout-ms"));
//!
//! let req = Request::get("/tax")
//!     .header("x-request-timeout-ms", "900")
//!     .body(Full::new(Bytes::new()))?;
//! assert_eq!(service.oneshot(req).await?.status(), 200);
//! # Ok(())
//! # }
//! ```

mod body;
mod future;
mod layer;
mod linger;
mod service;

pub use body::ResponseBody;
pub use future::ResponseFuture;
pub use layer::ServerBudgetLayer;
pub use service::ServerBudget;

#[cfg(test)]
mod tests;
