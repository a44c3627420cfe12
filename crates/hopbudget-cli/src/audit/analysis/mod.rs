//! The analysis: spans grouped into traces ([`group`]), each finished trace audited once and
//! only counters kept across traces ([`analyze`], whose `Accumulated` holds every
//! family's counters). One file per finding family, each with its report half of the same
//! name under [`crate::audit::report`]:
//!
//! - [`analyze`]: the hop tree from the hop spans' `deadline.*` attributes (C14): budget
//!   resets, missing deadlines, spikes, late work, depths, clock offsets;
//! - [`timing`]: plain OpenTelemetry span timing (work for nobody, chain depth, spikes);
//! - [`header_reset`]: resets and drops read from captured deadline headers;
//! - [`told`]: what a sidecar told each hop against what its caller had (C26);
//! - [`rollout`]: the rollout map per service.
//!
//! Shared by the families: `calls` (which calls carried a deadline, one answer for the
//! rollout map and the dropped-deadline findings) and `fired` (which spans ended because a
//! deadline fired, so that none is taken for a default timeout).
//!
//! Below this room: the span model (`span`, `status`), the histograms and the problems;
//! above it, the report, which turns the counters into findings.

pub mod analyze;
pub(crate) mod calls;
pub(crate) mod fired;
pub mod group;
pub mod header_reset;
pub mod rollout;
pub mod timing;
pub mod told;
