//! The only place where the two modes differ: how a hop is admitted, how it bounds its own
//! work and its outbound calls, and whether its work survives a caller that went away.
//!
//! - **`timeouts`**: every hop sets its own fresh timeout on each call it makes (the
//!   topology's `timeout_ms`), sends no deadline, and cancels nothing. The "nothing is
//!   cancelled" part is modelled by running each hop's handler on a *detached* task: when the
//!   caller's timeout fires and the call is dropped, the server-side work goes on, exactly as
//!   a service does that derives its outbound calls from a fresh `context.Background()`.
//! - **`propagated`**: hopbudget at every hop. The inbound budget is read from the wire
//!   (`grpc-timeout`, `x-request-timeout-ms`) with `codec::read_inbound` and becomes a local
//!   monotonic deadline (C1); a hop with less than its route's minimum budget refuses before
//!   any work (C3); the handler runs under `RequestBudget::run`, so it stops at the deadline
//!   (C4, C7) or when the caller goes away (C5); each outbound call forwards
//!   `remaining - margin - transit` (C2), refuses to start below the threshold (C3), and is
//!   itself bounded by the budget.
//! - **`--forgetful SERVICE`** (S13): in propagated mode that one service behaves like the
//!   timeouts mode on the way in: it ignores the inbound deadline, starts a fresh budget of its
//!   own default, forwards *that* downstream (the chain break), and its work survives its
//!   caller.
//!
//! The propagated wiring uses the core API directly (`RequestBudget`, `codec::read_inbound`,
//! `codec::grpc_timeout::encode`, `codec::millis::encode`, `RequestBudget::run`,
//! `admit_forward`). The tower layers of the `http` and `grpc` branches are meant to replace
//! the inbound and outbound halves here once they land.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use hopbudget::clock::SystemClock;
use hopbudget::codec::{self, read_inbound};
use hopbudget::observe::{Hop, HopLabels, Protocol as ObsProtocol};
use hopbudget::status::{REFUSED_METADATA, REMAINING_MS_HEADER, REQUIRED_MS_HEADER};
use hopbudget::{BudgetError, Deadline, Outcome, RequestBudget, Source};
use serde::{Deserialize, Serialize};

use super::services::{self, GRPC_PATH, HTTP_PATH, Node, Peer, REQUEST_ID};
use super::topology::Protocol;
use crate::proto::HopRequest;

/// Which behaviour every hop has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Per-hop fresh timeouts, no propagation, no cancellation.
    Timeouts,
    /// hopbudget everywhere.
    Propagated,
}

impl Mode {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Timeouts => "timeouts",
            Mode::Propagated => "propagated",
        }
    }
}

/// How a hop failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HopError {
    /// Refused before work (C3): required and remaining.
    Refused(Duration, Duration),
    /// The time limit fired.
    Expired,
    /// The caller went away.
    Cancelled,
    /// A malformed deadline header (C9).
    Malformed(String),
    /// Anything else.
    Failed(String),
}

impl HopError {
    fn outcome(&self) -> (Outcome, bool) {
        match self {
            HopError::Refused(..) => (Outcome::Refused, false),
            HopError::Expired => (Outcome::Expired, false),
            HopError::Cancelled => (Outcome::Cancelled, false),
            HopError::Malformed(_) | HopError::Failed(_) => (Outcome::Completed, true),
        }
    }
}

impl From<BudgetError> for HopError {
    fn from(e: BudgetError) -> Self {
        match e {
            BudgetError::Refused(r) => HopError::Refused(r.required(), r.remaining()),
            BudgetError::Cancelled => HopError::Cancelled,
            _ => HopError::Expired,
        }
    }
}

fn propagates(node: &Node) -> bool {
    node.mode == Mode::Propagated && !node.forgetful
}

fn labels(node: &Node) -> HopLabels {
    let (route, protocol) = match node.spec.protocol {
        Protocol::Grpc => (GRPC_PATH, ObsProtocol::Grpc),
        Protocol::Http => (HTTP_PATH, ObsProtocol::Http),
    };
    HopLabels::new(node.spec.name.as_str(), route, protocol)
}

/// Serve one inbound request (either protocol): admit it, run the hop body, record the
/// terminal status.
pub async fn serve(node: Arc<Node>, id: u64, headers: &HeaderMap) -> Result<u32, HopError> {
    if !propagates(&node) {
        // A fresh budget of the service's own default when forgetful (it then propagates
        // that reset budget, S13); no budget at all in timeouts mode.
        let budget = (node.mode == Mode::Propagated).then(|| {
            RequestBudget::new(
                Deadline::after(node.spec.timeout()),
                Source::Local,
                node.profile.policy(),
            )
        });
        let guard = node.collector.arrive(
            node.idx,
            id,
            budget.as_ref().map(RequestBudget::remaining),
            None,
        );
        let task_node = node.clone();
        // Detached: nothing stops this work when the caller goes away.
        let handle = tokio::spawn(async move {
            let result = match budget {
                Some(b) => match b.run(services::body(task_node, id)).await {
                    Ok(r) => r,
                    Err(e) => Err(e.into()),
                },
                None => services::body(task_node, id).await,
            };
            let (outcome, failed) = match &result {
                Ok(_) => (Outcome::Completed, false),
                Err(e) => e.outcome(),
            };
            guard.finish(outcome, failed);
            result
        });
        return handle
            .await
            .unwrap_or_else(|e| Err(HopError::Failed(format!("handler task failed: {e}"))));
    }

    let profile = &node.profile;
    let budget = match read_inbound(headers, profile.inbound(), profile.max(), &SystemClock) {
        Ok(Some(inbound)) => {
            RequestBudget::from_carrier(inbound.carrier, inbound.budget, profile.policy())
        }
        Ok(None) => RequestBudget::new(
            Deadline::after(profile.edge_total()),
            Source::Fallback,
            profile.policy(),
        ),
        Err(e) => {
            hopbudget::observe::malformed_header(&labels(&node), e.header().as_str());
            return Err(HopError::Malformed(e.to_string()));
        }
    };
    let hop = Hop::start(&labels(&node), &budget);
    let guard = node
        .collector
        .arrive(node.idx, id, Some(budget.remaining()), Some(budget.clone()));
    let path = match node.spec.protocol {
        Protocol::Grpc => GRPC_PATH,
        Protocol::Http => HTTP_PATH,
    };
    let min = profile.min_budget(path);
    if let Err(e) = budget.admit(min) {
        let e = HopError::from(e);
        hop.refuse(min);
        guard.finish(Outcome::Refused, false);
        return Err(e);
    }
    let result = match budget.run(services::body(node.clone(), id)).await {
        Ok(r) => r,
        Err(e) => Err(e.into()),
    };
    let (outcome, failed) = match &result {
        Ok(_) => (Outcome::Completed, false),
        Err(e) => e.outcome(),
    };
    hop.finish(outcome);
    guard.finish(outcome, failed);
    result
}

/// After queueing for a work slot, before the work: in propagated mode the work must still
/// fit in the remaining budget (C3).
pub fn before_work(node: &Node) -> Result<(), HopError> {
    if node.mode != Mode::Propagated {
        return Ok(());
    }
    match RequestBudget::current() {
        Some(b) => b.admit(node.spec.min_budget()).map_err(HopError::from),
        None => Ok(()),
    }
}

/// This service's own work (a sidecar call, a model evaluation), bounded by its own timeout
/// in timeouts mode; in propagated mode the budget's `run` already bounds it.
pub async fn own_work(node: &Node, cost: Duration) -> Result<(), HopError> {
    if node.mode == Mode::Timeouts {
        return tokio::time::timeout(node.spec.timeout(), tokio::time::sleep(cost))
            .await
            .map_err(|_| HopError::Expired);
    }
    tokio::time::sleep(cost).await;
    Ok(())
}

/// One outbound call to `callee`.
pub async fn call(node: &Node, callee: usize, peer: &Peer, id: u64) -> Result<u32, HopError> {
    if node.mode == Mode::Timeouts {
        return match tokio::time::timeout(node.spec.timeout(), send(peer, id, None)).await {
            Ok(r) => r,
            Err(_) => {
                node.collector.caller_timed_out(callee);
                Err(HopError::Expired)
            }
        };
    }
    let Some(budget) = RequestBudget::current() else {
        return Err(HopError::Failed("no request budget in scope".into()));
    };
    let forward = match budget.admit_forward() {
        Ok(f) => f,
        Err(e) => {
            // Refused before sending: no connection, no bytes (C3).
            node.collector.refused_by_caller(callee);
            return Err(e.into());
        }
    };
    match budget.run(send(peer, id, Some(forward))).await {
        Ok(r) => r,
        Err(e) => Err(e.into()),
    }
}

async fn send(peer: &Peer, id: u64, forward: Option<Duration>) -> Result<u32, HopError> {
    match peer {
        Peer::Grpc(client) => {
            let mut req = tonic::Request::new(HopRequest { request_id: id });
            req.metadata_mut()
                .insert(REQUEST_ID, tonic::metadata::MetadataValue::from(id));
            if let Some(f) = forward {
                let enc = codec::grpc_timeout::encode(f);
                if let Ok(v) = enc.as_str().parse() {
                    req.metadata_mut().insert(codec::GRPC_TIMEOUT, v);
                }
            }
            match client.clone().call(req).await {
                Ok(reply) => Ok(reply.into_inner().degraded),
                Err(status) => Err(from_grpc(&status)),
            }
        }
        Peer::Http { client, url } => {
            let mut req = client.post(url).header(REQUEST_ID, id);
            if let Some(f) = forward {
                req = req.header(
                    codec::REQUEST_TIMEOUT_MS,
                    codec::millis::encode(f).to_header_value(),
                );
            }
            let resp = req
                .send()
                .await
                .map_err(|e| HopError::Failed(format!("HTTP call failed: {e}")))?;
            match resp.status().as_u16() {
                200 => {
                    let v: serde_json::Value = resp
                        .json()
                        .await
                        .map_err(|e| HopError::Failed(format!("bad reply: {e}")))?;
                    Ok(v["degraded"].as_u64().unwrap_or(0) as u32)
                }
                503 => Err(HopError::Refused(
                    ms_header(resp.headers(), REQUIRED_MS_HEADER),
                    ms_header(resp.headers(), REMAINING_MS_HEADER),
                )),
                504 => Err(HopError::Expired),
                499 => Err(HopError::Cancelled),
                s => Err(HopError::Failed(format!("HTTP status {s}"))),
            }
        }
    }
}

fn ms_header(h: &HeaderMap, name: &str) -> Duration {
    Duration::from_millis(
        h.get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    )
}

fn from_grpc(status: &tonic::Status) -> HopError {
    let md = status.metadata();
    let meta_ms = |name: &str| {
        Duration::from_millis(
            md.get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
        )
    };
    match status.code() {
        tonic::Code::DeadlineExceeded
            if md.get(REFUSED_METADATA).and_then(|v| v.to_str().ok()) == Some("refused") =>
        {
            HopError::Refused(meta_ms(REQUIRED_MS_HEADER), meta_ms(REMAINING_MS_HEADER))
        }
        tonic::Code::DeadlineExceeded => HopError::Expired,
        // tonic's server enforces `grpc-timeout` itself and answers CANCELLED "Timeout
        // expired" when it fires first; that is an expiry (C4).
        tonic::Code::Cancelled if status.message().contains("Timeout expired") => HopError::Expired,
        tonic::Code::Cancelled => HopError::Cancelled,
        tonic::Code::InvalidArgument => HopError::Malformed(status.message().to_string()),
        _ => HopError::Failed(format!("{:?}: {}", status.code(), status.message())),
    }
}

/// The gRPC status for a hop error, spelled by the service's profile (C10).
pub fn grpc_status(node: &Node, e: &HopError) -> tonic::Status {
    let map = node.profile.grpc_status();
    let code = |o: Outcome| {
        tonic::Code::from_i32(
            map.for_outcome(o)
                .map_or(tonic::Code::Unknown as i32, |c| c.as_i32()),
        )
    };
    match e {
        HopError::Refused(required, remaining) => {
            let mut s = tonic::Status::new(
                code(Outcome::Refused),
                format!(
                    "refused before start: needs {} ms, {} ms remain",
                    required.as_millis(),
                    remaining.as_millis()
                ),
            );
            let md = s.metadata_mut();
            md.insert(
                REFUSED_METADATA,
                tonic::metadata::MetadataValue::from_static("refused"),
            );
            md.insert(REQUIRED_MS_HEADER, (required.as_millis() as u64).into());
            md.insert(REMAINING_MS_HEADER, (remaining.as_millis() as u64).into());
            s
        }
        HopError::Expired => tonic::Status::new(code(Outcome::Expired), "deadline expired"),
        HopError::Cancelled => tonic::Status::new(code(Outcome::Cancelled), "caller went away"),
        HopError::Malformed(m) => tonic::Status::invalid_argument(m.clone()),
        HopError::Failed(m) => tonic::Status::unavailable(m.clone()),
    }
}

/// The HTTP response for a hop error, spelled by the service's profile (C10).
pub fn http_response(node: &Node, e: &HopError) -> Response {
    let map = node.profile.http_status();
    let status = |o: Outcome, fallback: u16| {
        StatusCode::from_u16(map.for_outcome(o).unwrap_or(fallback))
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    };
    match e {
        HopError::Refused(required, remaining) => {
            let mut r = (status(Outcome::Refused, 503), "refused before start").into_response();
            let h = r.headers_mut();
            h.insert("retry-after", HeaderValue::from_static("0"));
            h.insert(REFUSED_METADATA, HeaderValue::from_static("refused"));
            h.insert(
                REQUIRED_MS_HEADER,
                HeaderValue::from(required.as_millis() as u64),
            );
            h.insert(
                REMAINING_MS_HEADER,
                HeaderValue::from(remaining.as_millis() as u64),
            );
            r
        }
        HopError::Expired => (status(Outcome::Expired, 504), "deadline expired").into_response(),
        HopError::Cancelled => {
            (status(Outcome::Cancelled, 499), "caller went away").into_response()
        }
        HopError::Malformed(m) => (StatusCode::BAD_REQUEST, m.clone()).into_response(),
        HopError::Failed(m) => (StatusCode::BAD_GATEWAY, m.clone()).into_response(),
    }
}
