//! One hedged call: the attempts in flight, the hedge timer, and the first answer.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;

use tokio::time::{Instant, Sleep, sleep_until};
use tower::{BoxError, Service, ServiceExt};

use super::AttemptRoute;
use super::settings::Settings;
use crate::{budget::RequestBudget, error::BudgetError};

type Reply<R> = Pin<Box<dyn Future<Output = Result<R, BoxError>> + Send>>;

/// One attempt: its own child of the request's budget (the same deadline, so the client layer
/// below stamps the same shrinking remaining time), cancelled when another attempt wins.
struct Attempt<R> {
    budget: RequestBudget,
    started: Instant,
    hedge: bool,
    reply: Reply<R>,
}

impl<R> Attempt<R> {
    /// The first attempt: `svc` is ready, and its `call` runs now, inside the attempt's scope,
    /// where a client layer reads the budget ([C8](crate::contract#c8)).
    fn first<S, Req>(parent: &RequestBudget, route: &AttemptRoute, mut svc: S, req: Req) -> Self
    where
        S: Service<Req, Response = R>,
        S::Future: Send + 'static,
        S::Error: Into<BoxError>,
    {
        let budget = parent.child();
        let fut = budget.sync_scope(|| route.sync_scope(|| svc.call(req)));
        let reply = Box::pin(budget.scope(async move { fut.await.map_err(Into::into) }));
        Self {
            budget,
            started: Instant::now(),
            hedge: false,
            reply,
        }
    }

    /// A hedge: a clone of the service, readied and called inside the attempt's scope.
    fn hedge<S, Req>(parent: &RequestBudget, route: &AttemptRoute, svc: S, req: Req) -> Self
    where
        S: Service<Req, Response = R> + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Into<BoxError>,
        Req: Send + 'static,
        R: Send + 'static,
    {
        let budget = parent.child();
        // The route is current while the service is readied and called, where a balancer
        // that knows about hedges picks the replica.
        let routed = route.scope(svc.oneshot(req));
        let reply = Box::pin(budget.scope(async move { routed.await.map_err(Into::into) }));
        Self {
            budget,
            started: Instant::now(),
            hedge: true,
            reply,
        }
    }
}

/// Whether `e` says the request's budget is over, which ends every attempt, not just this one.
fn ends_budget(e: &BoxError) -> bool {
    matches!(
        BudgetError::find(e.as_ref()),
        Some(BudgetError::Expired | BudgetError::Cancelled)
    )
}

/// Run one hedged call under `budget`. Every attempt ends with it: the race runs inside
/// `budget.run`, so at the deadline (or the caller's cancel) all attempts are dropped at once.
pub(super) async fn race<S, P, Req>(
    budget: RequestBudget,
    first: S,
    req: Req,
    settings: Arc<Settings<P>>,
) -> Result<S::Response, BoxError>
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Into<BoxError>,
    Req: Clone + Send + 'static,
{
    let delay = settings.delay();
    let expected = settings.expected.unwrap_or(delay);
    // A hedge must fit what is left *after* the delay: the callee is told the forward budget.
    let fits =
        |b: &RequestBudget| !b.is_done() && b.forward() >= expected.max(b.policy().refuse_below);
    let template = first.clone();
    let mut attempts = Vec::with_capacity(settings.max_attempts);
    // Where each attempt went, for a balancer below that sends hedges elsewhere.
    let route = AttemptRoute::new();
    attempts.push(Attempt::first(&budget, &route, first, req.clone()));
    let mut sent = 1;
    // No timer when no hedge could fit anyway: the budget only shrinks.
    let plan = budget.forward() >= delay + expected;
    let mut timer: Option<Pin<Box<Sleep>>> = (plan && sent < settings.max_attempts)
        .then(|| Box::pin(sleep_until(Instant::now() + delay)));
    let mut last_error: Option<BoxError> = None;

    let run_in = budget.clone();
    let race = poll_fn(move |cx| {
        loop {
            let mut i = 0;
            while i < attempts.len() {
                match attempts[i].reply.as_mut().poll(cx) {
                    Poll::Pending => i += 1,
                    Poll::Ready(Ok(res)) => {
                        let won = attempts.swap_remove(i);
                        let res = Ok(res);
                        settings.record(&res);
                        if won.hedge {
                            settings.counters.hedge_wins.fetch_add(1, Ordering::Relaxed);
                        }
                        if let Some(l) = &settings.learned {
                            l.record(won.started.elapsed());
                        }
                        // The losers: their scopes are cancelled (work they spawned stops
                        // too) and their futures dropped, which resets their streams. Nothing
                        // here counts them as failures.
                        for lost in attempts.drain(..) {
                            lost.budget.cancel();
                        }
                        return Poll::Ready(res);
                    }
                    Poll::Ready(Err(e)) => {
                        settings.record_error(&e);
                        if ends_budget(&e) {
                            return Poll::Ready(Err(e));
                        }
                        // One attempt failed; another in flight may still answer.
                        attempts.swap_remove(i);
                        last_error = Some(e);
                    }
                }
            }
            let Some(sleep) = timer.as_mut() else { break };
            if sleep.as_mut().poll(cx).is_pending() {
                break;
            }
            timer = None;
            if attempts.is_empty() || !fits(&budget) {
                break;
            }
            if let Some(t) = &settings.adaptive {
                if !t.try_send() {
                    // The callee refuses much of its traffic: no extra attempt (no wave).
                    settings.counters.throttled.fetch_add(1, Ordering::Relaxed);
                    break;
                }
            }
            if let Some(t) = &settings.throttle {
                if !t.try_hedge() {
                    // Throttled: not sent, and not waited for either.
                    settings.counters.throttled.fetch_add(1, Ordering::Relaxed);
                    break;
                }
            }
            settings.counters.hedges.fetch_add(1, Ordering::Relaxed);
            attempts.push(Attempt::hedge(
                &budget,
                &route,
                template.clone(),
                req.clone(),
            ));
            sent += 1;
            if sent < settings.max_attempts {
                timer = Some(Box::pin(sleep_until(Instant::now() + delay)));
            }
            // Poll the new attempt at once, so that it registers its wake-ups.
        }
        if attempts.is_empty() {
            let e = last_error
                .take()
                .unwrap_or_else(|| BudgetError::Cancelled.into());
            return Poll::Ready(Err(e));
        }
        Poll::Pending
    });
    match run_in.run(race).await {
        Ok(result) => result,
        Err(ended) => Err(ended.into()),
    }
}
