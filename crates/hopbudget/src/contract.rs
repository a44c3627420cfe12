//! The contract: the behaviour hopbudget promises, as numbered rules (C1-C28) and scenarios
//! (S1-S26). The docs of this crate cite them by number; each has an anchor on this page, so
//! rule `Cn` is `hopbudget::contract#cn` and scenario `Sn` is `hopbudget::contract#sn`: for
//! example [C3, refuse before starting](#c3), or [S2, refuse fast](#s2).
//!
//! Below is `docs/contract.md` of the repository, as it stands. The paths under **Where** name
//! files of the repository (relative to `crates/hopbudget/` unless they start with `crates/`
//! or `examples/`); the tests they name are in the repository, not in the published crate.
//! For [C3](crate::contract#c3) and [S2](crate::contract#s2) in code, see the [crate-level example](crate#example).
//!
//! Rules:
//! [C1](#c1), [C2](#c2), [C3](#c3), [C4](#c4), [C5](#c5), [C6](#c6), [C7](#c7), [C8](#c8),
//! [C9](#c9), [C10](#c10), [C11](#c11), [C12](#c12), [C13](#c13), [C14](#c14), [C15](#c15),
//! [C16](#c16), [C17](#c17), [C18](#c18), [C19](#c19), [C20](#c20), [C21](#c21), [C22](#c22),
//! [C23](#c23), [C24](#c24), [C25](#c25), [C26](#c26), [C27](#c27),
//! [C28](#c28).
//!
//! Scenarios:
//! [S1](#s1), [S2](#s2), [S3](#s3), [S4](#s4), [S5](#s5), [S6](#s6), [S7](#s7), [S8](#s8),
//! [S9](#s9), [S10](#s10), [S11](#s11), [S12](#s12), [S13](#s13), [S14](#s14), [S15](#s15),
//! [S16](#s16), [S17](#s17), [S18](#s18), [S19](#s19), [S20](#s20), [S21](#s21), [S22](#s22),
//! [S23](#s23), [S24](#s24), [S25](#s25), [S26](#s26).
//!
#![doc = include_str!("../contract.md")]

#[cfg(test)]
mod tests {
    /// The index above links C1-C28 and S1-S26: each needs its anchor in the contract, and a
    /// rule or scenario added to the contract needs its link here.
    #[test]
    fn every_rule_and_scenario_in_the_index_has_its_anchor() {
        let text = include_str!("../contract.md");
        for (prefix, count) in [("c", 28), ("s", 26)] {
            for n in 1..=count {
                let anchor = format!("<a id=\"{prefix}{n}\"></a>");
                assert!(text.contains(&anchor), "{anchor} is missing");
            }
            let next = format!("<a id=\"{prefix}{}\"></a>", count + 1);
            assert!(!text.contains(&next), "{next}: add it to the index");
        }
    }
}
