//! # hopbudget
//!
//! End-to-end deadline propagation across service hops. A user request has one pool of time;
//! every hop it passes through learns how much is left, forwards slightly less, refuses work it
//! cannot finish, and stops its children when the time is up or the caller is gone.
//!
//! The behaviour is specified as numbered rules (C1-C28) and scenarios (S1-S26) in the
//! [contract] (`docs/contract.md` in the repository); the docs cite them by
//! number, each has an anchor there (rule [C3](crate::contract#c3) is [`contract#c3`](crate::contract#c3), scenario
//! [S2](crate::contract#s2) [`contract#s2`](crate::contract#s2)), and each entry names the modules and tests behind
//! it. The guide, `docs/guide/` in the repository, has a
//! page per topic; each module below names its page.
//!
//! ## The pieces
//!
//! - [`Deadline`]: an instant on the monotonic clock ([C1](crate::contract#c1)).
//! - [`RequestBudget`]: one request's deadline, its origin, and a cancellation tree that
//!   records *why* it ended, expired or cancelled ([C4](crate::contract#c4), [C5](crate::contract#c5), [C7](crate::contract#c7)). Ambient through a task-local
//!   scope; carried across `spawn`, `spawn_blocking` and any future by [`spawn`],
//!   [`spawn_blocking`], [`spawn_detached`] and [`FutureExt`] ([C11](crate::contract#c11), [C12](crate::contract#c12)).
//! - [`fan_out`]: siblings sharing one deadline ([S8](crate::contract#s8)).
//! - [`codec`]: the wire carriers (`grpc-timeout`, relative and epoch milliseconds, Connect,
//!   Envoy) and reading the tightest inbound budget ([C9](crate::contract#c9)).
//! - [`status`]: terminal statuses and their HTTP/gRPC spelling ([C10](crate::contract#c10)).
//! - [`retry`]: a `tower::retry` policy that obeys [C6](crate::contract#c6).
//! - [`hedge`]: hedged calls inside the budget: one more attempt after a delay, only when it
//!   fits, capped by a token bucket; the first answer wins, the others are cancelled.
//! - [`throttle`]: client-side adaptive throttling (Google SRE) of every call, or of retries
//!   and hedges only: no retry waves at a callee that refuses much of its traffic.
//! - [`queue`]: the queue boundary: stamp a message's deadline, check it before any work,
//!   dead-letter what expired in the backlog ([C11](crate::contract#c11), [S10](crate::contract#s10)).
//! - [`Profile`]: the adoption profile, validated at start-up ([C15](crate::contract#c15)).
//! - [`degrade`]: take a cheaper path when the budget cannot pay for the full one.
//! - [`cache`]: serve stale when a recompute cannot finish in the budget (store-free; Redis in
//!   `redis`).
//! - [`learned`]: a per-route refuse threshold learned from the route's own latency ([C3](crate::contract#c3)).
//! - [`admission`]: deadline-aware admission ([C21](crate::contract#c21), [S17](crate::contract#s17)): a tower layer and a semaphore whose
//!   waiters are served earliest-deadline-first and dropped, without taking a slot, the moment
//!   their budget can no longer cover the work.
//!
//! ## Features
//!
//! `default = []`: the core above needs only tokio, tokio-util, tower, http and serde.
//! Integrations are opt-in:
//!
//! | feature | what it adds |
//! |---|---|
//! | `http` | tower server and client layers for HTTP |
//! | `axum` | an axum extractor for the request budget |
//! | `reqwest` | a reqwest-middleware integration |
//! | `grpc` | tonic server and client layers |
//! | `metrics` | counters and histograms through the `metrics` facade |
//! | `prometheus` | `observe::prometheus`: a Prometheus recorder builder with hopbudget's buckets |
//! | `otlp` | `observe::otlp`: OpenTelemetry span export to an OTLP JSON file |
//! | `postgres` | `postgres`: PostgreSQL queries under a statement timeout from the budget, with real cancels |
//! | `redis` | `redis`: a read-through Redis cache that serves stale when a recompute cannot finish |
//! | `nats` | `queue::nats`: JetStream publisher, consumer and dead-letter stream; core NATS request/reply |
//! | `kafka` | `queue::kafka`: Kafka producer and consumer through rdkafka (builds librdkafka with a C compiler and make) |
//! | `otel` | `observe::propagation`: W3C trace context (the installed propagator) across hops |
//! | `full` | all of the above |
//!
//! ## Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use std::time::Duration;
//! use hopbudget::{BudgetError, Profile, RequestBudget};
//!
//! let profile = Profile::default();
//! let budget = RequestBudget::local(Duration::from_millis(120), profile.policy());
//! // The tax service needs 200 ms: refuse before touching the database (S2).
//! match budget.admit(Duration::from_millis(200)) {
//!     Err(BudgetError::Refused(r)) => assert_eq!(r.remaining(), Duration::from_millis(120)),
//!     other => panic!("{other:?}"),
//! }
//! # }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]
// The hop core (`hop`, its inbound and outbound halves) is protocol-neutral and serves every
// adapter; a build with only some integrations leaves the parts that serve the others unused.
// Dead code is still an error where every part is used: the all-features build CI lints.
#![cfg_attr(
    not(feature = "full"),
    allow(dead_code, unused_imports, unreachable_pub)
)]

pub mod admission;
mod answer;
mod budget;
pub mod cache;
mod classify;
pub mod clock;
pub mod codec;
pub mod config;
pub mod contract;
pub mod degrade;
mod downstream;
mod error;
pub mod fan_out;
#[cfg(feature = "grpc")]
#[cfg_attr(docsrs, doc(cfg(feature = "grpc")))]
pub mod grpc;
pub mod hedge;
pub mod hop;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
pub mod learned;
mod macros;
pub mod observe;
mod outcome;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;
pub mod profile;
pub mod queue;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
pub mod retry;
pub mod status;
mod task;
pub mod throttle;

pub use budget::{BudgetId, Deadline, HopPolicy, RequestBudget, Scoped, Source};
pub use downstream::DownstreamError;
pub use error::{BudgetError, EndCause, Refused};
pub use outcome::Outcome;
#[doc(inline)]
pub use profile::Profile;
pub use profile::shared::SharedProfile;
pub use task::{
    FutureExt, TaskHandle, WithBudget, spawn, spawn_blocking, spawn_detached, spawn_with,
};

/// The README's code blocks, compiled as doctests (`cargo test --doc -p hopbudget
/// --all-features`), so the examples a user reads first always build.
#[cfg(all(doctest, feature = "axum", feature = "reqwest", feature = "grpc"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
