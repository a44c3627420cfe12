//! The server side of every hop, once, for every protocol: the inbound verdict (read the
//! carriers, refuse before work, [C3](crate::contract#c3)), one guard that owns the request's
//! budget and its [`Hop`](crate::observe::Hop) record (`record`), and exactly one outcome.
//!
//! The HTTP server layer, the gRPC server layer and the queue consumer are thin adapters over
//! this module. An adapter owns bytes and spelling (an HTTP status, a `grpc-status`, an ack or
//! a dead letter); it never decides an outcome itself:
//!
//! ```text
//! carriers (headers / metadata / message headers)
//!   -> HopConfig::admit: read the tightest carrier (injected wall clock), clamp, route rule
//!        -> Verdict: Malformed | Expired | Refused | Admitted(HopGuard)
//!   -> HopGuard: owns the budget and the Hop span; every poll of the handler and of the
//!      response body runs inside `HopGuard::enter` (budget scope + span)
//!   -> outcome, exactly once: the answer's own status (C17), else the budget's end cause,
//!      else completed; then the request's non-detached work is ended
//! ```
//!
//! A guard dropped before its answer was complete means the caller went away (a dropped
//! future, RST_STREAM, a closed connection): the budget is cancelled and the outcome is its
//! end cause, `cancelled`, or `expired` if the deadline had already passed ([C4](crate::contract#c4), [C5](crate::contract#c5)). No time
//! window is involved.
//!
//! # Example: a custom protocol adapter
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use std::sync::Arc;
//! use hopbudget::hop::{Verdict, HopConfig, RouteLabel};
//! use hopbudget::observe::Protocol;
//! use hopbudget::{Outcome, Profile, RequestBudget};
//!
//! let config = Arc::new(HopConfig::new(Profile::default(), Protocol::Http));
//! let mut headers = http::HeaderMap::new();
//! headers.insert("x-request-timeout-ms", "300".parse().unwrap());
//! match config.admit(&headers, RouteLabel::Path("/orders")) {
//!     Verdict::Admitted(mut guard) => {
//!         let seen = guard.enter(|| RequestBudget::current().map(|b| b.remaining()));
//!         assert_eq!(seen.unwrap().as_millis(), 300);
//!         guard.finish(); // completed; the request's children are ended
//!     }
//!     other => panic!("{other:?}"),
//! }
//! // A path no profile rule names is labelled `other` in metrics and traces (C20).
//! assert_eq!(config.route_label(RouteLabel::Path("/orders/7")), hopbudget::hop::OTHER_ROUTE);
//! # }
//! ```
//!
//! Guide: *Observability*, `docs/guide/observability.md` in the repository.

mod guard;
mod inbound;
pub(crate) mod outbound;
pub(crate) mod record;
pub(crate) mod server_layer;

pub use guard::HopGuard;
pub use inbound::{HopConfig, Verdict, strip_internal_markers};
pub(crate) use record::AnswerStatus;
// Route labels are defined with the rest of a hop's labels (`observe/labels/`); their public
// name is here, for the adapters that pass them to `HopConfig`.
pub use crate::observe::labels::{OTHER_ROUTE, RouteLabel};
