//! The attempt pairs the best possible hedge is computed from ([`best`](super::best)): the
//! same seeded schedule over the same sockets, each call sending its first attempt and its
//! second (the one a hedge would send: attempt 1 of that call, the same draw as in the hedged
//! runs) at the same moment, both run to their answer, and both timed at the client. A pair is
//! what one call's two attempts really took under the machine's load at that moment, so a
//! stall that slows both shows in both.

use bytes::Bytes;
use hopbudget::http::client::ClientBudgetLayer;
use hopbudget::{Profile, RequestBudget};
use http_body_util::Full;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::{ServiceBuilder, ServiceExt};

use super::best::Pair;
use super::callee::{self, Tail};
use super::options::{TailOptions, schedule};

/// Run the schedule with two attempts a call, on a callee with `tail`; one pair a call.
pub(super) async fn record(opts: &TailOptions, tail: Tail) -> Result<Vec<Pair>, String> {
    let stop = CancellationToken::new();
    let (addr, _counts) = callee::start(tail, stop.clone()).await?;
    let profile = Profile::default();
    let client = ServiceBuilder::new()
        .layer(ClientBudgetLayer::new(profile.clone()))
        .service(super::runtime::http2_client());
    let url = format!("http://{addr}/tail");
    let request = |call: u64, attempt: u32| {
        http::Request::get(&url)
            .header(callee::CALL, call)
            .header(callee::ATTEMPT, attempt)
            .body(Full::new(Bytes::new()))
            .map_err(|e| format!("cannot build a request: {e}"))
    };
    // One call to open the HTTP/2 connection, which the callee does not count.
    let warm = RequestBudget::local(opts.budget, profile.policy());
    let _ = warm
        .scope(client.clone().oneshot(request(callee::WARM_UP, 0)?))
        .await;

    let arrivals = schedule(opts);
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(arrivals.len());
    let limit = opts.budget;
    let budget_ms = limit.as_secs_f64() * 1000.0;
    for (call, at) in arrivals.iter().enumerate() {
        tokio::time::sleep_until(started + *at).await;
        let (first, second) = (request(call as u64, 0)?, request(call as u64, 1)?);
        let client = client.clone();
        let budget = RequestBudget::local(opts.budget, profile.policy());
        tasks.push(tokio::spawn(budget.scope(async move {
            let began = Instant::now();
            // Each attempt's time to its answer; one that did not answer in time took the
            // whole budget as far as the caller is concerned.
            let timed = |req| {
                let client = client.clone();
                async move {
                    let answer = client.oneshot(req).await;
                    let took = began.elapsed();
                    match answer {
                        Ok(r) if r.status() == 200 && took <= limit => took.as_secs_f64() * 1000.0,
                        _ => budget_ms,
                    }
                }
            };
            let (first_ms, second_ms) = tokio::join!(timed(first), timed(second));
            Pair {
                first_ms,
                second_ms,
            }
        })));
    }
    let mut pairs = Vec::with_capacity(tasks.len());
    for t in tasks {
        pairs.push(t.await.map_err(|e| format!("a call panicked: {e}"))?);
    }
    stop.cancel();
    Ok(pairs)
}
