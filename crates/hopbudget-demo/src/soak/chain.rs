//! The chain under load: `edge -> mid -> leaf`, three axum services, each behind
//! [`ServerBudgetLayer`] (the leaf also behind the admission layer when its profile has a
//! section for it) and calling the next through [`BudgetMiddleware`], each counted by its
//! [`Ledger`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hopbudget::admission::AdmissionLayer;
use hopbudget::http::reqwest::{BudgetMiddleware, budget_error};
use hopbudget::http::server::ServerBudgetLayer;
use hopbudget::{BudgetError, Profile, RequestBudget};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::ledger::{Ledger, account};
use super::overload::{CAPACITY_WORK, overload_leaf_profile};

/// The running chain.
pub(super) struct Chain {
    /// Faces the load generator.
    pub(super) edge: Hop,
    /// Calls the leaf.
    pub(super) mid: Hop,
    /// Does the work.
    pub(super) leaf: Hop,
}

impl Chain {
    /// Start leaf, mid and edge, each calling the one started before it, until `stop`. In
    /// overload mode the leaf has a fixed capacity behind the admission layer; in the mix it
    /// has a 50 ms minimum budget and 1,024 slots.
    pub(super) async fn start(overload: bool, stop: CancellationToken) -> Result<Self, String> {
        let (profile, fixed_work) = if overload {
            (overload_leaf_profile(), Some(CAPACITY_WORK))
        } else {
            (
                "service: leaf\nroutes: [{path: /, min_budget_ms: 50}]\n".to_owned(),
                None,
            )
        };
        let leaf = start_hop("leaf", &profile, None, 1_024, fixed_work, stop.clone()).await?;
        let mid = start_hop(
            "mid",
            "service: mid\n",
            Some(leaf.addr),
            0,
            None,
            stop.clone(),
        )
        .await?;
        let edge = start_hop("edge", "service: edge\n", Some(mid.addr), 0, None, stop).await?;
        Ok(Self { edge, mid, leaf })
    }

    /// The hops, edge first, as the report lists them.
    pub(super) fn hops(&self) -> [&Hop; 3] {
        [&self.edge, &self.mid, &self.leaf]
    }

    /// Whether no hop future is alive (each owns at most one deadline timer).
    pub(super) fn idle(&self) -> bool {
        self.hops()
            .iter()
            .all(|h| h.ledger.in_flight.load(Ordering::SeqCst) == 0)
    }
}

#[derive(Clone)]
struct HopState {
    next: Option<(ClientWithMiddleware, String)>,
    slots: Arc<Semaphore>,
    /// Fixed leaf work in overload mode (the admission layer holds the slots then); else the
    /// request's `work` parameter.
    fixed_work: Option<Duration>,
}

/// The leaf work a request asks for: `?work=MS`, else none.
fn work_ms(uri: &axum::http::Uri) -> u64 {
    uri.query()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("work=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A middle hop calls the next; the leaf waits for a slot and does its work.
async fn handle(
    State(state): State<HopState>,
    budget: RequestBudget,
    uri: axum::http::Uri,
) -> Response {
    let work_ms = work_ms(&uri);
    match &state.next {
        Some((client, url)) => match client.get(format!("{url}?work={work_ms}")).send().await {
            Ok(res) if res.status().is_success() => "ok".into_response(),
            Ok(res) => (
                StatusCode::BAD_GATEWAY,
                format!("downstream {}", res.status()),
            )
                .into_response(),
            Err(e) => match budget_error(&e) {
                Some(error) => deadline_answer(error),
                None => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
            },
        },
        None => {
            if let Some(work) = state.fixed_work {
                // Overload mode: the admission layer around this handler gave it its slot,
                // with the work plus the answer's way back still covered (C21).
                tokio::time::sleep(work).await;
                return "done".into_response();
            }
            // In the mix the cost is unknown (a slow dependency), so the deadline alone ends
            // the wait and the work (C4, C7).
            let work = Duration::from_millis(work_ms);
            let permit = tokio::select! {
                permit = state.slots.clone().acquire_owned() => permit.ok(),
                () = tokio::time::sleep_until(budget.deadline().instant()) => None,
            };
            let Some(_permit) = permit else {
                return deadline_answer(&BudgetError::Refused(hopbudget::Refused::new(
                    work,
                    budget.remaining(),
                )));
            };
            tokio::time::sleep(work).await;
            "done".into_response()
        }
    }
}

/// A downstream deadline outcome, spelt as this hop's own answer (C4, C10).
fn deadline_answer(error: &BudgetError) -> Response {
    let (code, outcome) = match error {
        BudgetError::Refused(_) => (StatusCode::SERVICE_UNAVAILABLE, "refused"),
        BudgetError::Expired => (StatusCode::GATEWAY_TIMEOUT, "expired"),
        _ => (
            StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
            "cancelled",
        ),
    };
    let mut res = (code, error.to_string()).into_response();
    res.headers_mut()
        .insert("x-deadline-outcome", HeaderValue::from_static(outcome));
    res
}

/// A running hop.
pub(super) struct Hop {
    /// `edge`, `mid` or `leaf`.
    pub(super) name: &'static str,
    /// Where it listens.
    pub(super) addr: SocketAddr,
    /// What it counted.
    pub(super) ledger: Arc<Ledger>,
}

/// The HTTP client of the hops and of the load generator.
pub(super) fn reqwest_client() -> reqwest::Client {
    // Idle connections close soon after the load stops, so their tasks end and the live task
    // count can return to its baseline.
    reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_secs(1))
        .build()
        .unwrap_or_default()
}

/// Start one hop on a loopback port: its profile from `profile_yaml`, calling `next` (the leaf
/// calls nobody and has `slots` for its work).
async fn start_hop(
    name: &'static str,
    profile_yaml: &str,
    next: Option<SocketAddr>,
    slots: usize,
    fixed_work: Option<Duration>,
    stop: CancellationToken,
) -> Result<Hop, String> {
    let profile =
        Profile::from_yaml(profile_yaml, format!("soak-{name}.yaml")).map_err(|e| e.to_string())?;
    let ledger = Arc::new(Ledger::default());
    let state = HopState {
        next: next.map(|addr| {
            (
                ClientBuilder::new(reqwest_client())
                    .with(BudgetMiddleware::new(profile.clone()))
                    .build(),
                format!("http://{addr}/"),
            )
        }),
        slots: Arc::new(Semaphore::new(slots)),
        fixed_work,
    };
    // Admission, when the profile has a section for it, inside the server layer: the budget
    // exists before the request queues for a slot (C21).
    let admission = AdmissionLayer::from_profile(&profile);
    let router = Router::new()
        .route("/", get(handle))
        .with_state(state)
        .layer(
            tower::ServiceBuilder::new()
                .layer(ServerBudgetLayer::new(profile))
                .option_layer(admission),
        )
        .layer(axum::middleware::from_fn_with_state(
            ledger.clone(),
            account,
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("cannot bind a loopback port for {name}: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("no local address for {name}: {e}"))?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await;
    });
    Ok(Hop { name, addr, ledger })
}
