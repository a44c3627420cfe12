//! What a report carries for `hopbudget audit --merge` (`merge_state` in `--json`): the
//! counters it was built from, with the names they refer to, and the version that wrote it.
//! The report writes it; `merge.rs` reads it back and adds several up.

use serde::{Deserialize, Serialize};

use crate::audit::analysis::analyze::Accumulated;
use crate::audit::analysis::group::GroupStats;
use crate::audit::input::InputStats;
use crate::audit::problem::{Problem, ProblemKind, Problems};
use crate::audit::span::Interner;

/// The version of the `merge_state` layout; bumped when it changes.
pub const STATE_FORMAT: u32 = 2;

/// The hopbudget version that wrote a report (`hopbudget_version` in `--json`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The counters a report was built from, as `--json` writes them (`merge_state`), so that the
/// reports of several instances merge exactly (`hopbudget audit --merge`). Its layout is
/// versioned by [`STATE_FORMAT`] and is not meant to be read otherwise. It is written compact
/// (on one line) even in the pretty-printed report: it is for `--merge`, not for reading, and
/// pretty-printed its lists of pairs would be eight times as long.
#[derive(Clone, Debug, Serialize)]
#[serde(transparent)]
pub struct MergeState(Box<serde_json::value::RawValue>);

/// The problems as kept in the state.
#[derive(Serialize, Deserialize)]
pub(crate) struct ProblemsState {
    pub(crate) shown: Vec<Problem>,
    pub(crate) total: u64,
    pub(crate) kinds: Vec<ProblemKind>,
}

/// What `merge_state` holds (owned, for reading it back).
#[derive(Serialize, Deserialize)]
pub(crate) struct State {
    pub(crate) format: u32,
    /// The interned names, by symbol number (0 is the overflow name).
    pub(crate) names: Vec<String>,
    pub(crate) names_overflowed: u64,
    pub(crate) acc: Accumulated,
    pub(crate) input: InputStats,
    pub(crate) grouping: GroupStats,
    pub(crate) problems: ProblemsState,
}

/// The same, borrowed, for writing it.
#[derive(Serialize)]
struct StateRef<'a> {
    format: u32,
    names: Vec<&'a str>,
    names_overflowed: u64,
    acc: &'a Accumulated,
    input: &'a InputStats,
    grouping: &'a GroupStats,
    problems: ProblemsRef<'a>,
}

#[derive(Serialize)]
struct ProblemsRef<'a> {
    shown: &'a [Problem],
    total: u64,
    kinds: &'a [ProblemKind],
}

/// The state of one audit, for its report.
pub(crate) fn state(
    acc: &Accumulated,
    names: &Interner,
    input: &InputStats,
    grouping: &GroupStats,
    problems: &Problems,
) -> MergeState {
    let state = StateRef {
        format: STATE_FORMAT,
        names: names.all().collect(),
        names_overflowed: names.overflowed,
        acc,
        input,
        grouping,
        problems: ProblemsRef {
            shown: &problems.shown,
            total: problems.total,
            kinds: &problems.kinds,
        },
    };
    // Serializing counters, strings and sorted pairs cannot fail; were it to, the report says
    // `null` and `--merge` refuses it, naming the file.
    MergeState(serde_json::value::to_raw_value(&state).unwrap_or_else(|_| {
        serde_json::value::RawValue::from_string("null".to_owned()).unwrap_or_default()
    }))
}
