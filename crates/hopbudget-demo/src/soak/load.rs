//! The load generator: the mix (or, overloaded, good requests only) sent to the edge at a
//! fixed rate, open loop (a slow answer does not slow the sender), and what the client saw.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hdrhistogram::Histogram;

use super::mix::Kind;
use super::options::SoakOptions;
use super::overload::OVERLOAD_BUDGET_MS;

/// What the client saw for one kind of request.
#[derive(Debug, Default)]
pub(super) struct ClientTally {
    pub(super) sent: AtomicU64,
    pub(super) by_status: Mutex<std::collections::BTreeMap<String, u64>>,
}

impl ClientTally {
    fn record(&self, what: String) {
        if let Ok(mut m) = self.by_status.lock() {
            *m.entry(what).or_default() += 1;
        }
    }
}

/// What the load generator sent and saw.
pub(super) struct Load {
    /// Per kind, in [`Kind::ALL`] order.
    pub(super) tallies: Arc<[ClientTally; 5]>,
    /// Client latency of every request not answered with a refusal (S17's admitted p99).
    pub(super) admitted: Arc<Mutex<Histogram<u64>>>,
    /// Requests sent.
    pub(super) sent: u64,
    /// Seconds of load.
    pub(super) secs: f64,
}

impl Load {
    /// Requests the client gave up on before an answer (C5).
    pub(super) fn abandoned(&self) -> u64 {
        self.tallies
            .iter()
            .filter_map(|t| {
                t.by_status
                    .lock()
                    .ok()
                    .and_then(|m| m.get("abandoned").copied())
            })
            .sum()
    }
}

/// Send requests to `edge` through `client` at `opts.rate` for `opts.duration`, then wait for
/// every answer.
pub(super) async fn send(
    opts: &SoakOptions,
    client: &reqwest::Client,
    edge: SocketAddr,
) -> Result<Load, String> {
    let overload = opts.overload.is_some();
    let tallies: Arc<[ClientTally; 5]> = Arc::new(Default::default());
    // A histogram of fixed size (1 µs to 10 min, 3 significant digits): the run must not grow
    // with the requests it sends, or the memory check would measure the load generator.
    let admitted = Arc::new(Mutex::new(
        Histogram::<u64>::new_with_bounds(1, 600_000_000, 3)
            .map_err(|e| format!("cannot make the latency histogram: {e}"))?,
    ));
    let url = format!("http://{edge}/");
    let start = tokio::time::Instant::now();
    let mut requests = tokio::task::JoinSet::new();
    let mut i: u64 = 0;
    loop {
        let at = start + Duration::from_secs_f64(i as f64 / opts.rate);
        if at >= start + opts.duration {
            break;
        }
        tokio::time::sleep_until(at).await;
        let kind = if overload { Kind::Good } else { Kind::nth(i) };
        i += 1;
        let (header, work) = if overload {
            (OVERLOAD_BUDGET_MS.to_string(), 0)
        } else {
            let (header, work) = kind.request();
            (header.to_owned(), work)
        };
        let send = client
            .get(format!("{url}?work={work}"))
            .header("x-request-timeout-ms", header)
            .send();
        requests.spawn(answer(kind, send, tallies.clone(), admitted.clone()));
        // Reap finished request tasks as we go, so the set stays small.
        while requests.try_join_next().is_some() {}
    }
    let secs = start.elapsed().as_secs_f64();
    while requests.join_next().await.is_some() {}
    Ok(Load {
        tallies,
        admitted,
        sent: i,
        secs,
    })
}

/// Wait for one request's answer (a cancelled one for 100 ms at most) and tally its status.
async fn answer(
    kind: Kind,
    send: impl Future<Output = reqwest::Result<reqwest::Response>>,
    tallies: Arc<[ClientTally; 5]>,
    admitted: Arc<Mutex<Histogram<u64>>>,
) {
    let tally = &tallies[Kind::ALL.iter().position(|k| *k == kind).unwrap_or(0)];
    tally.sent.fetch_add(1, Ordering::SeqCst);
    let what = if kind == Kind::Cancelled {
        // The user gives up while budget remains (C5).
        match tokio::time::timeout(Duration::from_millis(100), send).await {
            Err(_) => "abandoned".to_owned(),
            Ok(Ok(res)) => res.status().as_u16().to_string(),
            Ok(Err(e)) => format!("error: {e}"),
        }
    } else {
        let began = tokio::time::Instant::now();
        let what = match send.await {
            Ok(res) => res.status().as_u16().to_string(),
            Err(e) => format!("error: {e}"),
        };
        if what != "503"
            && let Ok(mut a) = admitted.lock()
        {
            let micros = u64::try_from(began.elapsed().as_micros()).unwrap_or(u64::MAX);
            a.saturating_record(micros.max(1));
        }
        what
    };
    tally.record(what);
}
