//! `read_inbound` over an arbitrary header map: lines of `name:value`, any bytes in the value.
//! It must never panic, the winner is never above the maximum, and a clamped budget is the
//! maximum exactly (rule C9).
#![no_main]

use std::time::Duration;

use hopbudget::clock::WallClock;
use hopbudget::codec::{Carrier, InboundCarriers, read_inbound};
use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;

const MAX: Duration = Duration::from_secs(30);

/// A wall clock that always reads the same instant, so a run is reproducible.
#[derive(Debug)]
struct FixedClock;

impl WallClock for FixedClock {
    fn now_unix_ms(&self) -> u64 {
        1_800_000_000_000
    }
}

fuzz_target!(|data: &[u8]| {
    let mut headers = HeaderMap::new();
    for line in data.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
        else {
            continue;
        };
        headers.append(name, value);
    }
    let carriers = InboundCarriers::new(Carrier::ALL);
    if let Ok(Some(inbound)) = read_inbound(&headers, &carriers, MAX, &FixedClock) {
        assert!(inbound.budget <= MAX);
        assert!(!inbound.clamped || inbound.budget == MAX);
    }
});
