//! A balancer over a fixed list of replicas that knows about hedges: each request goes to the
//! replica with the fewest requests in flight, and a hedge never to a replica an earlier
//! attempt of its call went to.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use tower::{BoxError, Service};

use super::AttemptRoute;

/// The requests in flight on each replica, and where the next tie-break starts; shared by the
/// balancer's clones.
#[derive(Debug)]
struct Load {
    in_flight: Vec<AtomicUsize>,
    cursor: AtomicUsize,
}

/// Spreads requests over replicas, fewest in flight first (ties taken in turn), and sends a
/// hedge of a [`HedgeLayer`](super::HedgeLayer) above it to a replica none of its call's
/// earlier attempts went to, as gRPC's hedging policy (A6) asks: the replica the first attempt
/// waits on may be the slow one (a noisy neighbour), and a hedge there waits with it. With
/// every replica taken, the fewest in flight wins again.
///
/// Every replica must be ready for the balancer to be ready (as hyper's and reqwest's clients
/// always are): it picks in `call`, once it sees which attempt it routes.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use hopbudget::hedge::{HedgeBalance, HedgeLayer};
/// use hopbudget::{HopPolicy, RequestBudget};
/// use tower::{ServiceBuilder, ServiceExt};
///
/// let ms = Duration::from_millis;
/// // Replica 0 is slow (a noisy neighbour), replica 1 quick; each answers with its number.
/// let replica = |n: usize, took: Duration| {
///     tower::service_fn(move |_req: ()| async move {
///         tokio::time::sleep(took).await;
///         Ok::<_, tower::BoxError>(n)
///     })
/// };
/// let replicas = vec![replica(0, ms(1_000)), replica(1, ms(20))];
/// let client = ServiceBuilder::new()
///     .layer(HedgeLayer::new(ms(50), 2, |_: &()| true))
///     .service(HedgeBalance::new(replicas));
///
/// let budget = RequestBudget::local(ms(500), HopPolicy::DEFAULT);
/// let answer = budget.scope(client.oneshot(())).await.unwrap();
/// assert_eq!(answer, 1, "the first attempt went to replica 0, its hedge to replica 1");
/// # }
/// ```
#[derive(Debug)]
pub struct HedgeBalance<S> {
    replicas: Vec<S>,
    load: Arc<Load>,
    hedge_aware: bool,
}

impl<S: Clone> Clone for HedgeBalance<S> {
    fn clone(&self) -> Self {
        Self {
            replicas: self.replicas.clone(),
            load: self.load.clone(),
            hedge_aware: self.hedge_aware,
        }
    }
}

impl<S> HedgeBalance<S> {
    /// Balance over `replicas` (at least one).
    ///
    /// See the [example](Self#examples).
    pub fn new(replicas: Vec<S>) -> Self {
        Self {
            load: Arc::new(Load {
                in_flight: replicas.iter().map(|_| AtomicUsize::new(0)).collect(),
                cursor: AtomicUsize::new(0),
            }),
            replicas,
            hedge_aware: true,
        }
    }

    /// Route hedges like any request, to the replica with the fewest in flight even when an
    /// earlier attempt of the call waits there: only to measure what the rule is worth.
    ///
    /// See the [example](Self#examples).
    pub fn ignore_hedges(mut self) -> Self {
        self.hedge_aware = false;
        self
    }

    /// Requests in flight on each replica now.
    ///
    /// See the [example](Self#examples).
    pub fn in_flight(&self) -> Vec<usize> {
        self.load
            .in_flight
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .collect()
    }

    /// The replica for the next request: fewest in flight among those not `taken`, ties in
    /// turn from a cursor that moves on with every pick.
    fn pick(&self, taken: &[usize]) -> usize {
        let n = self.replicas.len();
        let start = self.load.cursor.fetch_add(1, Ordering::Relaxed) % n;
        let order = (0..n).map(|k| (start + k) % n);
        let fewest = |allowed: &dyn Fn(usize) -> bool| {
            order
                .clone()
                .filter(|&i| allowed(i))
                .min_by_key(|&i| self.load.in_flight[i].load(Ordering::Relaxed))
        };
        fewest(&|i| !taken.contains(&i))
            .or_else(|| fewest(&|_| true))
            .unwrap_or(0)
    }
}

/// Counts a request out of its replica's in-flight count when it ends or is dropped.
struct InFlight {
    load: Arc<Load>,
    replica: usize,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.load.in_flight[self.replica].fetch_sub(1, Ordering::Relaxed);
    }
}

impl<S, Req> Service<Req> for HedgeBalance<S>
where
    S: Service<Req>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        if self.replicas.is_empty() {
            return Poll::Ready(Err("HedgeBalance has no replica to send to".into()));
        }
        let mut pending = false;
        for r in &mut self.replicas {
            match r.poll_ready(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
                Poll::Pending => pending = true,
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(Ok(()))
        }
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let route = AttemptRoute::current();
        let taken = match (&route, self.hedge_aware) {
            (Some(r), true) => r.taken(),
            _ => Vec::new(),
        };
        let replica = self.pick(&taken);
        if let Some(r) = &route {
            r.pick(replica);
        }
        self.load.in_flight[replica].fetch_add(1, Ordering::Relaxed);
        let counted = InFlight {
            load: self.load.clone(),
            replica,
        };
        let fut = self.replicas[replica].call(req);
        Box::pin(async move {
            let _counted = counted;
            fut.await.map_err(Into::into)
        })
    }
}
