//! Relative milliseconds (`x-request-timeout-ms`, Envoy's header): any bytes decode without
//! panicking; any `Duration`, up to `Duration::MAX`, encodes to a value that decodes to no more
//! than it (rule C2).
#![no_main]

use std::time::Duration;

use hopbudget::codec::millis;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(budget) = millis::decode(data) {
        let back = millis::decode(millis::encode(budget).as_bytes()).expect("re-encoded decodes");
        assert!(back <= budget, "{budget:?} re-encoded as {back:?}");
    }
    if data.len() >= 12 {
        let secs = u64::from_le_bytes(data[..8].try_into().unwrap());
        let nanos = u32::from_le_bytes(data[8..12].try_into().unwrap()) % 1_000_000_000;
        let budget = Duration::new(secs, nanos);
        let encoded = millis::encode(budget);
        let back = millis::decode(encoded.as_bytes()).unwrap_or_else(|e| {
            panic!(
                "encode({budget:?}) = {} does not decode: {e}",
                encoded.as_str()
            )
        });
        assert!(back <= budget, "{budget:?} went out as {back:?}");
    }
});
