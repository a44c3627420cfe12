//! `grpc-timeout`: any bytes decode without panicking, and whatever decodes re-encodes to a
//! value that decodes to no more than it (rule C2: the wire never grows a budget). Any
//! `Duration` the encoder is handed, up to `Duration::MAX`, must come back through the decoder.
#![no_main]

use std::time::Duration;

use hopbudget::codec::grpc_timeout;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(budget) = grpc_timeout::decode(data) {
        let back = grpc_timeout::decode(grpc_timeout::encode(budget).as_bytes())
            .expect("an encoded value decodes");
        assert!(back <= budget, "{budget:?} re-encoded as {back:?}");
    }
    if data.len() >= 12 {
        let secs = u64::from_le_bytes(data[..8].try_into().unwrap());
        let nanos = u32::from_le_bytes(data[8..12].try_into().unwrap()) % 1_000_000_000;
        let budget = Duration::new(secs, nanos);
        let encoded = grpc_timeout::encode(budget);
        let back = grpc_timeout::decode(encoded.as_bytes())
            .unwrap_or_else(|e| panic!("encode({budget:?}) = {encoded} does not decode: {e}"));
        assert!(back <= budget, "{budget:?} went out as {back:?}");
    }
});
