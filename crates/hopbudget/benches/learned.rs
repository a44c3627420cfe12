//! The learned refuse threshold on the hot path: what a server layer adds per request when a
//! route learns (one `threshold()` at admission, one `record()` at completion), next to the
//! static lookup it replaces. Compare with the server layer's per-request cost in the README
//! (`http_layers`).
//!
//! Run with `cargo bench -p hopbudget --bench learned`.

use std::hint::black_box;
use std::time::Duration;

use hopbudget::Profile;
use hopbudget::learned::{LearnConfig, LearnedThreshold};

fn main() {
    divan::main();
}

fn warm() -> LearnedThreshold {
    let t = LearnedThreshold::new(Duration::from_millis(40), LearnConfig::P50);
    for i in 0..10_000u64 {
        t.record(Duration::from_micros(20_000 + i * 7));
    }
    t
}

/// `record()` reads the clock; `record_at()` takes an instant the layer already has.
#[divan::bench(threads = [1, 2])]
fn record(b: divan::Bencher) {
    let t = warm();
    b.bench(|| t.record(black_box(Duration::from_micros(23_456))));
}

#[divan::bench(threads = [1, 2])]
fn record_at(b: divan::Bencher) {
    let t = warm();
    let now = tokio::time::Instant::now();
    b.bench(|| t.record_at(black_box(now), black_box(Duration::from_micros(23_456))));
}

/// The threshold once computed for the current slice: two atomic loads and a clock read.
#[divan::bench(threads = [1, 2])]
fn threshold(b: divan::Bencher) {
    let t = warm();
    t.threshold();
    b.bench(|| black_box(&t).threshold());
}

/// What the first caller in a new slice pays (once per `window / 8`, 7.5 s by default): the
/// quantile over every bucket of a full window. Alternating between two slices makes every
/// call a recompute.
#[divan::bench]
fn threshold_recompute(b: divan::Bencher) {
    let t = LearnedThreshold::new(Duration::from_millis(40), LearnConfig::P50);
    let slice = LearnConfig::P50.window / 8;
    let start = tokio::time::Instant::now();
    for s in 0..8u32 {
        for i in 0..1_000u64 {
            t.record_at(start + slice * s, Duration::from_micros(1_000 + i * 97));
        }
    }
    let (a, b2) = (start + slice * 7, start + slice * 8);
    let mut flip = false;
    b.bench_local(|| {
        flip = !flip;
        black_box(&t).threshold_at(if flip { a } else { b2 })
    });
}

/// The route lookup a layer does per request: a static route, then a learning one.
mod route_lookup {
    use super::*;

    fn profile() -> Profile {
        Profile::from_yaml(
            "routes:\n  - path: /static\n    min_budget_ms: 40\n  - path: /learned\n    min_budget_ms: 40\n    learn: {}\n",
            "bench.yaml",
        )
        .unwrap()
    }

    #[divan::bench]
    fn static_min_budget(b: divan::Bencher) {
        let p = profile();
        b.bench_local(|| black_box(&p).min_budget(black_box("/static")));
    }

    #[divan::bench]
    fn learned_min_budget(b: divan::Bencher) {
        let p = profile();
        let rule = p.route("/learned").unwrap();
        for _ in 0..100 {
            rule.learned().unwrap().record(Duration::from_millis(25));
        }
        b.bench_local(|| black_box(&p).min_budget(black_box("/learned")));
    }
}
