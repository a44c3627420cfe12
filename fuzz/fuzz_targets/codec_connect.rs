//! Connect's `connect-timeout-ms` (1-10 digits, no sign): any bytes decode without panicking
//! and never beyond ten nines; any `Duration` encodes to a value Connect accepts.
#![no_main]

use std::time::Duration;

use hopbudget::codec::millis;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(budget) = millis::decode_connect(data) {
        assert!(budget <= Duration::from_millis(millis::CONNECT_MAX_MS));
    }
    if data.len() >= 12 {
        let secs = u64::from_le_bytes(data[..8].try_into().unwrap());
        let nanos = u32::from_le_bytes(data[8..12].try_into().unwrap()) % 1_000_000_000;
        let budget = Duration::new(secs, nanos);
        let encoded = millis::encode_connect(budget);
        assert!(encoded.as_bytes().len() <= usize::from(millis::CONNECT_MAX_DIGITS));
        let back = millis::decode_connect(encoded.as_bytes()).unwrap_or_else(|e| {
            panic!(
                "encode_connect({budget:?}) = {} does not decode: {e}",
                encoded.as_str()
            )
        });
        assert!(back <= budget, "{budget:?} went out as {back:?}");
    }
});
