//! A call the service under test made to the downstream (what it carried, when it came, when
//! the service hung up), and how the downstream treats calls. Both downstreams, HTTP/1.1
//! ([`super::downstream`]) and gRPC (`grpc_callee`), record and answer these.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hopbudget::codec::{self, Carrier};
use tokio::sync::oneshot;
use tokio::time::Instant;

/// The longest the downstream holds a call it does not answer: every wait is bounded.
pub const HOLD_LIMIT: Duration = Duration::from_secs(10);

/// How the downstream treats the calls it receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Answer `200` at once (an empty message and `grpc-status: 0` over gRPC).
    Answer,
    /// Answer at once a call that carries a deadline; hold one that carries none until the
    /// service hangs up, so that the timeout it made up can be measured (C2, C8).
    Measure,
    /// Never answer: hold the call until the service hangs up (or [`HOLD_LIMIT`]).
    Hold,
    /// Answer at once that the deadline expired: `504` with `x-deadline-outcome: expired`
    /// (gRPC: DEADLINE_EXCEEDED, marked the same).
    Expired,
    /// Answer at once that the call was cancelled: `499` with `x-deadline-outcome:
    /// cancelled` (gRPC: CANCELLED, marked the same).
    Cancelled,
}

/// One call the service made to the downstream.
#[derive(Debug)]
pub struct Call {
    /// When its request head had arrived.
    pub at: Instant,
    /// Its headers, names lower-case.
    pub headers: Vec<(String, String)>,
    /// When the service closed the connection without waiting for an answer, or the hold
    /// ended; dropped when the downstream answered.
    pub closed: oneshot::Receiver<Instant>,
}

impl Call {
    /// The trace id of its `traceparent`, if it forwarded one.
    pub fn trace_id(&self) -> Option<&str> {
        self.header("traceparent")?.split('-').nth(1)
    }

    /// The first value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The deadline the call carried: the tightest of the well-known carriers it could read,
    /// with the header it came in; `Err` names a header whose value was unreadable.
    pub fn told(&self) -> Result<Option<(Duration, &'static str)>, String> {
        let now = || {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        };
        let mut tightest: Option<(Duration, &'static str)> = None;
        for carrier in Carrier::ALL {
            let name = carrier.default_header();
            if !codec::WELL_KNOWN.contains(&name) {
                continue;
            }
            let Some(value) = self.header(name) else {
                continue;
            };
            let budget = carrier
                .decode(value.as_bytes(), now)
                .map_err(|e| format!("{name}: {value:?} is unreadable ({e})"))?;
            if tightest.is_none_or(|(t, _)| budget < t) {
                tightest = Some((budget, name));
            }
        }
        Ok(tightest)
    }
}
