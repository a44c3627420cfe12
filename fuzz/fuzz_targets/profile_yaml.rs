//! The profile loader handed arbitrary text: it returns a profile or an error naming the field
//! (rule C15), never panics; a profile it accepts round-trips through `to_yaml`.
#![no_main]

use hopbudget::Profile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(profile) = Profile::from_yaml(text, "fuzz.yaml") {
        let again = Profile::from_yaml(&profile.to_yaml(), "fuzz-again.yaml")
            .unwrap_or_else(|e| panic!("accepted profile does not reload from to_yaml: {e}"));
        assert_eq!(profile.to_yaml(), again.to_yaml());
    }
});
