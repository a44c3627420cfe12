//! The profile as written in YAML ([`ProfileSpec`]), one field per section of the file, and the
//! top-level `service` name.

use serde::{Deserialize, Serialize};

use super::issues::Issues;
use super::{
    AdmissionSpec, HeaderSpec, LogSpec, OutboundSpec, QueueSpec, RouteSpec, SidecarSpec, StatusSpec,
};
use crate::codec::Carrier;

/// The profile as written in YAML: plain values, before validation. Every field has a default,
/// so a profile file need only name what it changes.
///
/// See the [example](crate::Profile#examples).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProfileSpec {
    /// The service's name, used in traces and metric labels.
    pub service: String,
    /// Budget given to a request that arrives without any deadline (rule [C8](crate::contract#c8)).
    pub edge_total_ms: i64,
    /// Largest inbound budget accepted; larger ones are clamped (rule [C9](crate::contract#c9)).
    pub max_ms: i64,
    /// Time a hop keeps back for itself before forwarding (rule [C2](crate::contract#c2)).
    pub hop_margin_ms: i64,
    /// Time allowed for the request to travel to the next hop (rule [C2](crate::contract#c2)).
    pub transit_allowance_ms: i64,
    /// Below this forward budget no downstream call starts, and below this remaining budget no
    /// handler starts unless its route says otherwise (rule [C3](crate::contract#c3)).
    pub refuse_below_ms: i64,
    /// After the first chunk of a streaming response, how long the stream may run (rule
    /// [C13](crate::contract#c13)).
    pub stream_lifetime_ms: i64,
    /// Arrivals with less than this much budget count as "low budget" in metrics.
    pub low_budget_ms: i64,
    /// The kill switch (rule [C24](crate::contract#c24)). `true` (the default): refuse what does
    /// not fit and end work at the deadline. `false`: observe only; budgets are still read,
    /// forwarded and recorded, hops record what enforcement would have done, and nothing is refused
    /// or cut for lack of time. Swap it into a running service with
    /// [`SharedProfile`](crate::SharedProfile).
    pub enforce: bool,
    /// Per-route settings; the first matching route wins.
    pub routes: Vec<RouteSpec>,
    /// Carriers read on arrival; the tightest wins.
    pub inbound: Vec<Carrier>,
    /// Carriers written on outbound calls.
    pub outbound: OutboundSpec,
    /// Header names of the HTTP carriers.
    pub headers: HeaderSpec,
    /// How terminal statuses are spelled on the wire.
    pub status: StatusSpec,
    /// The queue boundary's message headers.
    pub queue: QueueSpec,
    /// Deadline-aware admission ([C21](crate::contract#c21)): absent means no admission layer is
    /// configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<AdmissionSpec>,
    /// What the server layers log of their hops (see [`LogSpec`]).
    pub log: LogSpec,
    /// What `hopbudget proxy` does where the library would have the application's context
    /// (see [`SidecarSpec`]).
    pub sidecar: SidecarSpec,
}

impl Default for ProfileSpec {
    fn default() -> Self {
        Self {
            service: "unnamed".into(),
            edge_total_ms: 1_000,
            max_ms: 30_000,
            hop_margin_ms: 5,
            transit_allowance_ms: 1,
            refuse_below_ms: 10,
            stream_lifetime_ms: 300_000,
            low_budget_ms: 50,
            enforce: true,
            routes: Vec::new(),
            inbound: vec![
                Carrier::GrpcTimeout,
                Carrier::RelativeMs,
                Carrier::Connect,
                Carrier::Envoy,
            ],
            outbound: OutboundSpec::default(),
            headers: HeaderSpec::default(),
            status: StatusSpec::default(),
            queue: QueueSpec::default(),
            admission: None,
            log: LogSpec::default(),
            sidecar: SidecarSpec::default(),
        }
    }
}

/// The service name: not blank.
pub(super) fn check_service(service: &str, issues: &mut Issues) {
    if service.trim().is_empty() {
        issues.push("service", "must not be empty".into());
    }
}
