//! Property tests for the wire codecs: no input panics or overflows, a decoded budget is never
//! larger than the header says, and encode-then-decode never grows a budget (rules C2, C9).

use std::time::Duration;

use hopbudget::clock::SystemClock;
use hopbudget::codec::{Carrier, InboundCarriers, epoch, grpc_timeout, millis, read_inbound};
use http::{HeaderMap, HeaderValue};
use proptest::prelude::*;

fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        (0u64..200_000_000_000, 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        (0u64..10_000_000).prop_map(Duration::from_micros),
        Just(Duration::MAX),
        Just(Duration::ZERO),
    ]
}

const NOW: u64 = 1_800_000_000_000;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn no_input_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
        for carrier in Carrier::ALL {
            let _ = carrier.decode(&bytes, || NOW);
        }
    }

    #[test]
    fn no_text_input_panics(text in "[0-9HMSmun +-]{0,24}") {
        for carrier in Carrier::ALL {
            let _ = carrier.decode(text.as_bytes(), || NOW);
        }
    }

    #[test]
    fn grpc_timeout_decodes_exactly_what_the_header_says(value in 0u64..=99_999_999, unit in prop::sample::select(vec!['H', 'M', 'S', 'm', 'u', 'n'])) {
        let header = format!("{value}{unit}");
        let said = match unit {
            'H' => Duration::from_secs(value * 3600),
            'M' => Duration::from_secs(value * 60),
            'S' => Duration::from_secs(value),
            'm' => Duration::from_millis(value),
            'u' => Duration::from_micros(value),
            _ => Duration::from_nanos(value),
        };
        prop_assert_eq!(grpc_timeout::decode(header.as_bytes()), Ok(said));
    }

    #[test]
    fn inbound_budget_is_never_larger_than_the_header_or_the_maximum(ms in any::<u64>(), max_ms in 1u64..100_000) {
        let mut headers = HeaderMap::new();
        headers.insert("x-request-timeout-ms", HeaderValue::from(ms));
        let max = Duration::from_millis(max_ms);
        let got = read_inbound(&headers, &InboundCarriers::new([Carrier::RelativeMs]), max, &SystemClock);
        if ms.to_string().len() <= 19 {
            let got = got.unwrap().unwrap();
            prop_assert!(got.budget <= Duration::from_millis(ms));
            prop_assert!(got.budget <= max);
        } else {
            prop_assert!(got.is_err());
        }
    }

    #[test]
    fn grpc_timeout_round_trip_never_grows(d in any_duration()) {
        let enc = grpc_timeout::encode(d);
        prop_assert!(enc.as_bytes().len() <= 9);
        let back = grpc_timeout::decode(enc.as_bytes()).unwrap();
        prop_assert!(back <= d, "{:?} -> {} -> {:?}", d, enc, back);
    }

    #[test]
    fn millis_round_trip_never_grows(d in any_duration()) {
        let back = millis::decode(millis::encode(d).as_bytes());
        // A budget beyond 19 digits of ms cannot be sent; everything else comes back no larger.
        if let Ok(back) = back { prop_assert!(back <= d); }
        let connect = millis::decode_connect(millis::encode_connect(d).as_bytes()).unwrap();
        prop_assert!(connect <= d);
    }

    #[test]
    fn epoch_round_trip_never_grows(d in any_duration()) {
        let back = epoch::decode(epoch::encode(d, NOW).as_bytes(), NOW).unwrap();
        prop_assert!(back <= d);
    }
}
