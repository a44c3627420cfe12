//! Core benchmarks: clock reads, budget arithmetic, budget creation and every codec.
//!
//! Run with `cargo bench -p hopbudget --bench core`. `Instant::now()` (std and tokio) is the
//! floor the budget operations are compared against.

use std::hint::black_box;
use std::time::Duration;

use hopbudget::clock::SystemClock;
use hopbudget::codec::{Carrier, InboundCarriers, epoch, grpc_timeout, millis, read_inbound};
use hopbudget::{Deadline, HopPolicy, RequestBudget};

fn main() {
    divan::main();
}

mod floor {
    #[divan::bench]
    fn std_instant_now() -> std::time::Instant {
        std::time::Instant::now()
    }

    #[divan::bench]
    fn tokio_instant_now() -> tokio::time::Instant {
        tokio::time::Instant::now()
    }
}

mod budget {
    use super::*;

    #[divan::bench]
    fn deadline_remaining(b: divan::Bencher) {
        let d = Deadline::after(Duration::from_secs(10));
        b.bench_local(|| black_box(&d).remaining());
    }

    #[divan::bench]
    fn remaining(b: divan::Bencher) {
        let budget = RequestBudget::local(Duration::from_secs(10), HopPolicy::DEFAULT);
        b.bench_local(|| black_box(&budget).remaining());
    }

    #[divan::bench]
    fn forward(b: divan::Bencher) {
        let budget = RequestBudget::local(Duration::from_secs(10), HopPolicy::DEFAULT);
        b.bench_local(|| black_box(&budget).forward());
    }

    #[divan::bench]
    fn admit(b: divan::Bencher) {
        let budget = RequestBudget::local(Duration::from_secs(10), HopPolicy::DEFAULT);
        let cost = Duration::from_millis(200);
        b.bench_local(|| black_box(&budget).admit(black_box(cost)));
    }

    #[divan::bench]
    fn create_request_budget() -> RequestBudget {
        RequestBudget::from_carrier(
            Carrier::RelativeMs,
            black_box(Duration::from_millis(480)),
            HopPolicy::DEFAULT,
        )
    }
}

mod codec {
    use super::*;

    #[divan::bench(args = ["480m", "99999999u", "2S"])]
    fn grpc_timeout_parse(value: &str) -> Result<Duration, hopbudget::codec::InvalidValue> {
        grpc_timeout::decode(black_box(value.as_bytes()))
    }

    #[divan::bench(args = [Duration::from_millis(480), Duration::from_secs(3600)])]
    fn grpc_timeout_encode(d: Duration) -> hopbudget::codec::Encoded {
        grpc_timeout::encode(black_box(d))
    }

    #[divan::bench]
    fn relative_ms_parse() -> Result<Duration, hopbudget::codec::InvalidValue> {
        millis::decode(black_box(b"480"))
    }

    #[divan::bench]
    fn relative_ms_encode() -> hopbudget::codec::Encoded {
        millis::encode(black_box(Duration::from_millis(480)))
    }

    #[divan::bench]
    fn connect_parse() -> Result<Duration, hopbudget::codec::InvalidValue> {
        millis::decode_connect(black_box(b"480"))
    }

    #[divan::bench]
    fn epoch_ms_parse() -> Result<Duration, hopbudget::codec::InvalidValue> {
        epoch::decode(black_box(b"1800000000480"), black_box(1_800_000_000_000))
    }

    #[divan::bench]
    fn epoch_ms_encode() -> hopbudget::codec::Encoded {
        epoch::encode(
            black_box(Duration::from_millis(480)),
            black_box(1_800_000_000_000),
        )
    }

    #[divan::bench]
    fn read_inbound_default_carriers(b: divan::Bencher) {
        let carriers = InboundCarriers::new([
            Carrier::GrpcTimeout,
            Carrier::RelativeMs,
            Carrier::Connect,
            Carrier::Envoy,
        ]);
        let mut headers = http::HeaderMap::new();
        headers.insert("content-type", "application/json".parse().unwrap());
        headers.insert("x-request-timeout-ms", "480".parse().unwrap());
        b.bench_local(|| {
            read_inbound(
                black_box(&headers),
                &carriers,
                Duration::from_secs(30),
                &SystemClock,
            )
        });
    }
}
