//! Absolute epoch milliseconds (`x-request-deadline`, a queue's `deadline-epoch-ms`): any bytes
//! and any wall-clock reading decode without panicking; an encoded deadline decodes at the same
//! instant to no more than the budget (rule C2), whatever the budget and the clock.
#![no_main]

use std::time::Duration;

use hopbudget::codec::epoch;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        let _ = epoch::decode(data, 1_800_000_000_000);
        return;
    }
    let now = u64::from_le_bytes(data[..8].try_into().unwrap());
    let rest = &data[8..];
    let _ = epoch::decode(rest, now);
    if rest.len() >= 12 {
        let secs = u64::from_le_bytes(rest[..8].try_into().unwrap());
        let nanos = u32::from_le_bytes(rest[8..12].try_into().unwrap()) % 1_000_000_000;
        let budget = Duration::new(secs, nanos);
        let encoded = epoch::encode(budget, now);
        let back = epoch::decode(encoded.as_bytes(), now).unwrap_or_else(|e| {
            panic!(
                "encode({budget:?}, {now}) = {} does not decode: {e}",
                encoded.as_str()
            )
        });
        assert!(back <= budget, "{budget:?} at {now} went out as {back:?}");
    }
});
