//! The rollout map's rows ([`crate::audit::analysis::rollout`]): one per service, what `--json` prints
//! as `rollout`. The field names are stable; the guide documents them.

use serde::Serialize;

use crate::audit::analysis::rollout::RolloutAcc;
use crate::audit::analysis::timing::TimingAcc;
use crate::audit::span::{Interner, Sym};

/// Whether a service's outbound calls carry a deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Forwards {
    /// Every outbound call carried one.
    All,
    /// Some did.
    Some,
    /// None did.
    None,
    /// No outbound call was seen.
    NoCalls,
}

impl Forwards {
    /// Its name in the report (as in `--json`).
    pub fn name(self) -> &'static str {
        match self {
            Forwards::All => "all",
            Forwards::Some => "some",
            Forwards::None => "none",
            Forwards::NoCalls => "no_calls",
        }
    }
}

/// One service in the rollout map.
#[derive(Clone, Debug, Serialize)]
pub struct RolloutRow {
    /// Service name.
    pub service: String,
    /// Inbound requests: its SERVER and CONSUMER spans and its hop spans.
    pub inbound: u64,
    /// Of which arrived with a deadline (a carrier named in `deadline.source`, or a captured
    /// deadline header).
    pub inbound_with_deadline: u64,
    /// `inbound_with_deadline / inbound`, from 0 to 1; `null` with no inbound request.
    pub inbound_deadline_share: Option<f64>,
    /// Outbound calls: its CLIENT and PRODUCER spans, or another service's inbound span
    /// directly below one of its spans.
    pub calls_out: u64,
    /// Of which carried a deadline (a captured header on the client span, or the callee's
    /// inbound span arrived with one).
    pub calls_out_with_deadline: u64,
    /// Whether it forwards a deadline: `all`, `some`, `none` or `no_calls`.
    pub forwards: Forwards,
    /// Inbound requests refused: 503, RESOURCE_EXHAUSTED or `deadline.outcome = refused`.
    pub refused: u64,
    /// Inbound requests that went on past the late-work tolerance after their caller, the
    /// root or their deadline.
    pub late: u64,
}

/// The rows, shallowest service first (by the typical, median, depth of its server spans).
pub(crate) fn build(acc: &RolloutAcc, timing: &TimingAcc, names: &Interner) -> Vec<RolloutRow> {
    let depth = |s: &Sym| timing.services.get(s).and_then(|t| t.depth());
    let mut keys: Vec<&Sym> = acc.services.keys().collect();
    keys.sort_by_key(|s| (depth(s).unwrap_or(u32::MAX), names.name(**s)));
    keys.into_iter()
        .map(|s| {
            let r = &acc.services[s];
            let forwards = match (r.calls_out, r.calls_out_with_deadline) {
                (0, _) => Forwards::NoCalls,
                (n, w) if w == n => Forwards::All,
                (_, 0) => Forwards::None,
                _ => Forwards::Some,
            };
            RolloutRow {
                service: names.name(*s).to_owned(),
                inbound: r.inbound,
                inbound_with_deadline: r.inbound_with_deadline,
                inbound_deadline_share: (r.inbound > 0)
                    .then(|| r.inbound_with_deadline as f64 / r.inbound as f64),
                calls_out: r.calls_out,
                calls_out_with_deadline: r.calls_out_with_deadline,
                forwards,
                refused: r.refused,
                late: r.late,
            }
        })
        .collect()
}
