//! The server layer's in-process ratio to `tower::timeout`, timed in pairs.
//!
//! `http_layers` times each stack in its own block of samples, one stack after the other. On
//! a shared two-core VM the machine's speed drifts between those blocks by more than the
//! difference being measured: the same code gave a fresh-request ratio of 1.06x in one run
//! and 1.60x in the next. Here the stacks take turns instead. Each round times one batch of
//! `BATCH` requests per stack, back to back (a millisecond or two each, the order rotated
//! every round), and divides the layer's time per request by the `Timeout` stack's from the
//! same round. The figure is the median of those ratios over `ROUNDS` rounds; drift slower
//! than a round moves both halves of a pair alike and cancels. What pairing does not remove is
//! the change in the ratio itself as the host's load changes (1.38x to 1.69x over ten runs of
//! the fresh request): report the median over several runs, not one run.
//!
//! The requests are built inside the timed loop, as in `http_layers`' `stack_with_request_build`
//! and `stack_routed_request`: `x-request-timeout-ms: 500`, one instant service, the answer
//! dropped unread. The drop is timed too, unlike in divan, which drops a sample's outputs only
//! after timing it: the server layer records the hop's end when its response is dropped, and
//! a real server pays for that on every request. `fresh` has no extension map yet (a layer
//! around a plain hyper service); `routed` carries one extension already, as behind axum's
//! `Router::layer` (the router has inserted `MatchedPath`). With the `axum` feature, `app`
//! puts the same three stacks around a whole axum app with one instant route, as
//! `axum::serve` runs a layer wrapped around the router: the request reaches the layer fresh,
//! and the router then inserts its own extensions into the map the budget's insert made.
//!
//! Timed in the same rounds, and printed under each ratio: a clock read, and the budget's
//! insert into the request's extensions (see `Primitive`), two costs the layer cannot avoid
//! that differ most between machines.
//!
//! ```text
//! cargo bench -p hopbudget --bench http_ratio --features http        # fresh, routed
//! cargo bench -p hopbudget --bench http_ratio --features http,axum   # and app
//! ```
//!
//! `HOPBUDGET_RATIO_ROUNDS` sets the number of rounds (default 401).

use std::hint::black_box;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use hopbudget::Profile;
use hopbudget::http::server::ServerBudgetLayer;
use http::Request;
use http_body_util::Full;
use tower::{Layer, Service, ServiceExt};

mod support;
use support::{Bare, Req, RoutedBy};

/// Requests per stack per round: long enough to time well, short enough that a pair of
/// batches sees the same machine.
const BATCH: u32 = 2_000;
const ROUNDS: usize = 401;

fn request(routed: bool) -> Req {
    let mut req = Request::get("/quote")
        .header("x-request-timeout-ms", "500")
        .body(Full::new(bytes::Bytes::new()))
        .unwrap();
    if routed {
        req.extensions_mut().insert(RoutedBy);
    }
    req
}

/// One stack under test, boxed so that every stack is timed through the same call.
trait Stack {
    /// Nanoseconds per request over `BATCH` requests built in the loop.
    fn batch(&mut self, routed: bool) -> f64;
}

struct Timed<S>(S);

impl<S> Stack for Timed<S>
where
    S: Service<Req>,
    S::Error: std::fmt::Debug,
{
    fn batch(&mut self, routed: bool) -> f64 {
        let start = Instant::now();
        for _ in 0..BATCH {
            let _ = self.0.ready().now_or_never();
            let res = self.0.call(request(routed)).now_or_never();
            black_box(res.map(|r| r.unwrap()));
        }
        start.elapsed().as_nanos() as f64 / f64::from(BATCH)
    }
}

/// Two things the layer cannot do without, timed alone in the same rounds, so that a run
/// shows how much of the layer's cost over `Timeout` they are on this machine: its second
/// clock read (the hop's end, for late work, C14; `Timeout` reads the clock once, as the
/// layer does at admission), and putting the budget into the request's extensions (what
/// `req.extensions().get::<RequestBudget>()` and axum's `Extension<RequestBudget>` read).
/// The machines this was measured on differ most in these: a clock read took 18 ns on one
/// and 45-50 ns on the next.
enum Primitive {
    ClockRead,
    /// A request built and dropped, with the budget inserted: minus the `Build` batch, the
    /// insert alone. Into a map already made when `routed`.
    Insert {
        budget: hopbudget::RequestBudget,
        routed: bool,
    },
    Build {
        routed: bool,
    },
}

impl Stack for Primitive {
    fn batch(&mut self, _: bool) -> f64 {
        let start = Instant::now();
        match self {
            Primitive::ClockRead => {
                for _ in 0..BATCH {
                    black_box(tokio::time::Instant::now());
                }
            }
            Primitive::Insert { budget, routed } => {
                for _ in 0..BATCH {
                    let mut req = request(*routed);
                    req.extensions_mut().insert(budget.clone());
                    black_box(req);
                }
            }
            Primitive::Build { routed } => {
                for _ in 0..BATCH {
                    black_box(request(*routed));
                }
            }
        }
        start.elapsed().as_nanos() as f64 / f64::from(BATCH)
    }
}

fn rounds() -> usize {
    match std::env::var("HOPBUDGET_RATIO_ROUNDS") {
        Ok(text) => text.parse().unwrap_or_else(|_| {
            panic!("HOPBUDGET_RATIO_ROUNDS={text:?} is not a number of rounds")
        }),
        Err(_) => ROUNDS,
    }
}

/// The value at quantile `q` of `values`, sorted in place.
fn quantile(values: &mut [f64], q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    values[((values.len() - 1) as f64 * q).round() as usize]
}

/// The three stacks around `inner`: as is, behind `Timeout`, behind the server layer.
fn stacks<S, B>(inner: S) -> Vec<(&'static str, Box<dyn Stack>)>
where
    S: Service<Req, Response = http::Response<B>> + Clone + 'static,
    S::Error: std::fmt::Debug + Into<tower::BoxError>,
    B: http_body::Body<Data = bytes::Bytes> + 'static,
{
    let timeout = Duration::from_millis(500);
    vec![
        ("bare", Box::new(Timed(inner.clone()))),
        (
            "timeout",
            Box::new(Timed(
                tower::timeout::TimeoutLayer::new(timeout).layer(inner.clone()),
            )),
        ),
        (
            "layer",
            Box::new(Timed(
                ServerBudgetLayer::new(Profile::default()).layer(inner),
            )),
        ),
    ]
}

/// The primitives, timed beside the three stacks. `map_made`: the insert goes into a map the
/// request already has, as behind a router, and as in a whole axum app, where the router's
/// own inserts would otherwise have made it.
fn primitives(map_made: bool) -> Vec<(&'static str, Box<dyn Stack>)> {
    let budget = hopbudget::RequestBudget::local(Duration::from_millis(500), Default::default());
    let routed = map_made;
    vec![
        ("clock", Box::new(Primitive::ClockRead)),
        ("insert", Box::new(Primitive::Insert { budget, routed })),
        ("build", Box::new(Primitive::Build { routed })),
    ]
}

fn compare(
    request: &str,
    mut stacks: Vec<(&str, Box<dyn Stack>)>,
    routed: bool,
    map_made: bool,
    rounds: usize,
) {
    stacks.extend(primitives(map_made));
    // Warm up caches, the allocator and the layer's per-thread spares.
    for (_, stack) in &mut stacks {
        stack.batch(routed);
    }
    let mut ns: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); stacks.len()];
    let mut ratios = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let mut this_round = [0.0; 6];
        for k in 0..stacks.len() {
            let i = (round + k) % stacks.len();
            this_round[i] = stacks[i].1.batch(routed);
        }
        for (i, t) in this_round.iter().enumerate() {
            ns[i].push(*t);
        }
        ratios.push(this_round[2] / this_round[1]);
    }
    let median: Vec<f64> = ns.iter_mut().map(|ns| quantile(ns, 0.5)).collect();
    let medians: Vec<String> = stacks[..3]
        .iter()
        .zip(&median)
        .map(|((name, _), ns)| format!("{name} {ns:.0} ns"))
        .collect();
    println!(
        "{request:<7} layer / timeout: median {:.2}x [quartiles {:.2}, {:.2}] over {rounds} rounds; \
         medians per request: {}",
        quantile(&mut ratios, 0.5),
        quantile(&mut ratios, 0.25),
        quantile(&mut ratios, 0.75),
        medians.join(", "),
    );
    let (clock, insert) = (median[3], median[4] - median[5]);
    println!(
        "{:<7} of the layer's {:.0} ns over timeout: a clock read {clock:.0} ns, the budget's \
         extension insert {insert:.0} ns ({:.2}x of timeout together)",
        "",
        median[2] - median[1],
        (clock + insert) / median[1],
    );
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument picks `fresh` or `routed` alone.
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _enter = rt.enter();
    let rounds = rounds();
    let wanted = |name: &str| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str()));
    for (name, routed) in [("fresh", false), ("routed", true)] {
        if wanted(name) {
            compare(name, stacks(Bare), routed, routed, rounds);
        }
    }
    // The stacks around a whole axum app, as `axum::serve` runs them: the request reaches the
    // layer fresh, and the router inserts its own extensions after the budget's.
    #[cfg(feature = "axum")]
    if wanted("app") {
        compare("app", stacks(support::quote_app()), false, true, rounds);
    }
}
