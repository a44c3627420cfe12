//! What every service does in every mode: the hop's body (its own work under a concurrency
//! limit, then its downstream calls in parallel, then the background hand-off), how a call's
//! end is counted at the caller, and the settings a service's topology entry gives it (its
//! profile, its cheaper path, its admission cost).
//!
//! Everything that differs between modes (how an inbound request is admitted, how an outbound
//! call is bounded, whether work survives its caller) is the node's
//! [`HopMode`](super::node::HopMode), one file per mode under `behaviour/`.

use std::sync::Arc;

use futures_util::future::join_all;
use hopbudget::degrade::{Choice, Degrade};
use hopbudget::profile::{AdmissionRouteSpec, AdmissionSpec, ProfileSpec, RouteSpec};
use hopbudget::{Outcome, Profile, RequestBudget};

use super::collector::BackgroundOutcome;
use super::hop_error::HopError;
use super::node::Node;
use super::queue::{Job, Producer};
use super::topology::ServiceSpec;
use super::wire::route_of;

/// The mode-independent body of a hop: queue for a work slot, do this service's own work,
/// then call every downstream service in parallel. Returns how many parts of the answer are
/// degraded: optional calls that failed, and cheaper paths taken here or below.
pub async fn body(node: Arc<Node>, id: u64) -> Result<u32, HopError> {
    let cost = node.work_for(id);
    let mut degraded = 0;
    {
        let waiting = node.collector.queue_wait();
        let _permit = node
            .sem
            .acquire()
            .await
            .map_err(|_| HopError::Failed("service is shutting down".into()))?;
        drop(waiting);
        // After queueing, check again that the work still fits (C3, S2).
        node.behaviour.before_work(&node)?;
        let _work = node.collector.work(node.idx, id);
        // With a cheaper path and a budget, the budget left picks the path (the choice is on
        // a `degrade` span and in `hopbudget_degraded_total`); without a budget nothing is
        // known to save time for, and the full path runs.
        match (&node.degrade, &node.spec.degrade, RequestBudget::current()) {
            (Some(d), Some(spec), Some(budget)) => {
                let cheap = node.cheap_work_for(id);
                let (choice, result) = d
                    .run(
                        &budget,
                        spec.full_cost(),
                        || node.behaviour.own_work(&node, cost),
                        || node.behaviour.own_work(&node, cheap),
                    )
                    .await;
                result?;
                degraded += u32::from(choice == Choice::Cheap);
            }
            _ => node.behaviour.own_work(&node, cost).await?,
        }
    }
    let calls = node
        .peers
        .iter()
        .map(|(callee, peer)| node.behaviour.call(&node, *callee, peer, id));
    let results = join_all(calls).await;
    for (result, call) in results.into_iter().zip(&node.spec.calls) {
        match result {
            Ok(d) => degraded += d,
            Err(_) if call.optional => degraded += 1,
            Err(e) => return Err(e),
        }
    }
    if let Some(queue) = &node.queue {
        hand_off(&node, queue, id);
    }
    Ok(degraded)
}

/// Count how a call to `callee` ended, as its caller saw it: refusals and expiries are
/// counted here because the callee may never have seen them (its caller refused locally, or
/// its server layer answered before the handler).
pub fn count_at_caller<T>(node: &Node, callee: usize, result: &Result<T, HopError>) {
    match result.as_ref().err().map(HopError::outcome) {
        Some(Outcome::Refused) => node.collector.refused(callee),
        Some(Outcome::Expired) => node.collector.expired(callee),
        _ => {}
    }
}

/// Hand background work over the queue (S11), with the headers the node's mode stamps.
pub fn hand_off(node: &Node, queue: &Producer, id: u64) {
    if node.spec.background.is_none() {
        return;
    }
    let headers = node.behaviour.background_headers(node);
    node.collector.background_scheduled(id);
    let job = Job {
        id,
        headers,
        work: node.background_for(id),
        scheduled: tokio::time::Instant::now(),
    };
    if let Err(e) = queue.send(job) {
        node.collector
            .background_done(e.0.id, BackgroundOutcome::DroppedExpired);
    }
}

/// The [`Degrade`] of a service whose topology gives it a cheaper path.
pub fn degrade_for(spec: &ServiceSpec) -> Option<Degrade> {
    let d = spec.degrade.as_ref()?;
    Some(Degrade::new(
        spec.name.clone(),
        route_of(spec),
        d.path.clone(),
    ))
}

/// The profile a service's hopbudget layers run with: its name, its minimum budget as a
/// route rule on the path it serves, and its concurrency as the admission limit with its
/// work's p99 as the admission cost.
pub fn profile_for(spec: &ServiceSpec) -> Result<Profile, String> {
    let path = route_of(spec);
    let routes = if spec.min_budget_ms > 0 {
        vec![RouteSpec {
            path: path.into(),
            min_budget_ms: Some(spec.min_budget_ms as i64),
            mode: Default::default(),
            learn: None,
        }]
    } else {
        Vec::new()
    };
    let profile_spec = ProfileSpec {
        service: spec.name.clone(),
        routes,
        // The service's slots as an admission section (EDF), used where the mode puts the
        // admission layer (C21). The cost is the work's p99 (`admission_cost_ms`), not the
        // minimum budget: past
        // capacity EDF grants a slot to the waiter closest to its refusal instant, so a
        // request starts with little more than the cost left, and work longer than the cost
        // expires half done (with reco-scorer's 180 ms minimum against a 180/240 ms p50/p99
        // that was 3 admitted requests in 10, a third of its slot time, at 3x capacity).
        admission: Some(AdmissionSpec {
            limit: i64::from(spec.concurrency),
            routes: vec![AdmissionRouteSpec {
                path: path.into(),
                cost_ms: admission_cost_ms(spec) as i64,
            }],
            queue_bound: spec
                .queue_bound
                .map_or(AdmissionSpec::default().queue_bound, i64::from),
            ..AdmissionSpec::default()
        }),
        ..ProfileSpec::default()
    };
    Profile::from_spec(profile_spec).map_err(|issues| {
        issues
            .iter()
            .map(|i| format!("{}: {}", i.field, i.reason))
            .collect::<Vec<_>>()
            .join("; ")
    })
}

/// What a waiter must still have left to be given a slot: the p99 of the work the hop will
/// do. A hop with a cheaper path (`degrade`) can still answer with that path's work, so a
/// waiter is refused only below the cheaper path's p99; with more left, the hop picks the path
/// itself when its work starts.
pub fn admission_cost_ms(spec: &ServiceSpec) -> u64 {
    let work = match &spec.degrade {
        Some(d) => d.latency.p99_ms.ceil() as u64,
        None => work_p99_ms(spec),
    };
    work.max(spec.min_budget_ms)
}

/// The p99 of a service's own work, whole ms rounded up: the largest of its latency's and its
/// faults' (an upper bound of the mixture's).
pub fn work_p99_ms(spec: &ServiceSpec) -> u64 {
    spec.faults
        .iter()
        .filter(|f| f.rate > 0.0)
        .map(|f| f.latency.p99_ms)
        .fold(spec.latency.p99_ms, f64::max)
        .ceil() as u64
}
