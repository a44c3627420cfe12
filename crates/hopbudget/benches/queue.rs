//! The queue boundary's cost per message: the consumer gate beside decoding the message's
//! headers, which a consumer pays anyway.
//!
//! Run with `cargo bench -p hopbudget --bench queue --features nats`. `decode` is the floor:
//! the epoch codec alone, and building the header map a client hands over with each message
//! (async-nats' `HeaderMap` with the `nats` feature, a `HashMap` otherwise). `gate` is what
//! the boundary adds: check a message and run an empty piece of work under its budget and hop
//! span, or turn it away.

use std::collections::HashMap;
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use hopbudget::Profile;
use hopbudget::clock::{SystemClock, WallClock};
use hopbudget::codec::epoch;
use hopbudget::queue::{Decision, Gate, Processed, Stamper};

fn main() {
    divan::main();
}

const NOW: u64 = 1_800_000_000_000;

/// A wall clock stopped at `NOW`, so every run checks the same deadlines.
#[derive(Debug)]
struct FixedClock;

impl WallClock for FixedClock {
    fn now_unix_ms(&self) -> u64 {
        NOW
    }
}

/// The headers of a typical stamped message: the deadline pair plus two of the application's.
fn pairs(deadline: &str) -> [(&'static str, String); 4] {
    [
        ("deadline-epoch-ms", deadline.to_owned()),
        ("deadline-origin-ms", "500".to_owned()),
        ("order-id", "ord_8c1b2f7a".to_owned()),
        ("content-type", "application/json".to_owned()),
    ]
}

fn headers(deadline: &str) -> HashMap<String, String> {
    pairs(deadline)
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
}

fn gate() -> Gate {
    Gate::new(Profile::default(), "orders").with_wall_clock(Arc::new(FixedClock))
}

/// Poll a future that is ready at once (the benchmarks' work is empty).
fn ready<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => unreachable!("the benchmarked work is ready at once"),
    }
}

mod decode {
    use super::*;

    #[divan::bench]
    fn epoch_value() -> Result<std::time::Duration, hopbudget::codec::InvalidValue> {
        epoch::decode(black_box(b"1800000000400"), black_box(NOW))
    }

    #[divan::bench]
    fn header_hashmap(b: divan::Bencher) {
        let deadline = (NOW + 400).to_string();
        b.bench_local(|| headers(black_box(&deadline)));
    }

    #[cfg(feature = "nats")]
    #[divan::bench]
    fn header_nats(b: divan::Bencher) {
        let deadline = (NOW + 400).to_string();
        b.bench_local(|| {
            let mut map = async_nats::HeaderMap::new();
            for (k, v) in pairs(black_box(&deadline)) {
                map.insert(k, v);
            }
            map
        });
    }
}

mod gate {
    use super::*;

    fn run_live<C: hopbudget::queue::HeaderCarrier>(gate: &Gate, headers: &C) -> bool {
        match gate.check(headers) {
            Decision::Live(admitted) => {
                matches!(ready(admitted.run(async {})), Processed::Completed(()))
            }
            _ => false,
        }
    }

    #[divan::bench]
    fn live_check_and_run(b: divan::Bencher) {
        let gate = gate();
        let msg = headers(&(NOW + 400).to_string());
        assert!(run_live(&gate, &msg));
        b.bench_local(|| run_live(&gate, black_box(&msg)));
    }

    #[cfg(feature = "nats")]
    #[divan::bench]
    fn live_check_and_run_nats(b: divan::Bencher) {
        let gate = gate();
        let mut msg = async_nats::HeaderMap::new();
        for (k, v) in pairs(&(NOW + 400).to_string()) {
            msg.insert(k, v);
        }
        assert!(run_live(&gate, &msg));
        b.bench_local(|| run_live(&gate, black_box(&msg)));
    }

    #[divan::bench]
    fn missing_check_and_run(b: divan::Bencher) {
        let gate = gate();
        let msg = HashMap::<String, String>::new();
        assert!(run_live(&gate, &msg));
        b.bench_local(|| run_live(&gate, black_box(&msg)));
    }

    #[divan::bench]
    fn expired_check(b: divan::Bencher) {
        let gate = gate();
        let msg = headers("1000");
        assert!(matches!(gate.check(&msg), Decision::Expired(_)));
        b.bench_local(|| gate.check(black_box(&msg)));
    }

    #[divan::bench]
    fn malformed_check(b: divan::Bencher) {
        let gate = gate();
        let msg = headers("soon");
        assert!(matches!(gate.check(&msg), Decision::Malformed(_)));
        b.bench_local(|| gate.check(black_box(&msg)));
    }
}

mod stamp {
    use super::*;

    #[divan::bench]
    fn stamp_in_a_request(b: divan::Bencher) {
        let profile = Profile::default();
        let stamper = Stamper::new(&profile);
        let budget =
            hopbudget::RequestBudget::local(std::time::Duration::from_secs(10), profile.policy());
        b.bench_local(|| {
            let mut h = HashMap::<String, String>::with_capacity(2);
            stamper.stamp_with(black_box(&budget), &mut h).map(|_| h)
        });
    }

    #[divan::bench]
    fn system_wall_clock() -> u64 {
        SystemClock.now_unix_ms()
    }
}
